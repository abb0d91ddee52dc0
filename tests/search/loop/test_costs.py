"""The campaign's trial model (search.loop.costs): fed by a real campaign on the simulated cluster, whose trials
take a known time per example, it learns that law and predicts a trial's duration from it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import optuna
import pytest
from toy_specs import toy_toml

from cluster.outcome import Outcome, TrialStatus
from cluster.sim_models import CurveModel
from cluster.simulated import SimulatedExecutor
from cluster.trial_cost import Basis, LogLinearLaw, Quantity, Resources
from search.loop.campaign import Campaign
from search.loop.costs import TrialCosts, from_first_epoch, from_progress, run_epochs, startup
from search.loop.segments import Segment
from search.loop.trials import RunningTrial
from search.session.runner import load_study
from search.spec.campaign_spec import CampaignSpec, parse_spec
from search.store.folder import CampaignFolder
from search.vocab.terms import Transition
from tests.search.loop.runs import run_on
from trainers.api import TrialConfig

LAW = LogLinearLaw.power(2e-3, batch_size=-0.7)  # seconds per example
EXAMPLES_PER_EPOCH = 1000
EPOCHS = 3
SPACE = {
    "batch_size": {"type": "int", "low": 16, "high": 512, "log": True},
    "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
}


def campaign(tmp_path: Path, n_trials: int, workers: int, jitter: float = 0.05, **study: object) -> Campaign:
    text = toy_toml("costs", n_trials, EPOCHS, seed=3, space=SPACE, metric="accuracy", **study)
    spec: CampaignSpec = parse_spec(
        tomllib.loads(text), "costs.toml", text, check_trainer=False
    )  # simulated: no trainer runs
    folder = CampaignFolder(tmp_path / "costs")
    folder.create(text)
    study_ = load_study(spec, folder, create=True)
    model = CurveModel(seed=1, jitter=jitter, per_example=LAW, examples_per_epoch=EXAMPLES_PER_EPOCH)
    executor = SimulatedExecutor(workers, model, controller_time_scale=0)
    return Campaign(spec, folder, study_, executor, clock=executor.clock)


@pytest.mark.timeout(120)
def test_a_campaign_learns_its_trials_time_per_example_and_predicts_their_durations(tmp_path: Path) -> None:
    run = campaign(tmp_path, n_trials=30, workers=4)
    run.run()
    fit = run.costs.model.fit(Quantity.PER_EXAMPLE)
    assert fit is not None
    assert fit.law.slopes["batch_size"] == pytest.approx(-0.7, abs=0.05)
    params = {"batch_size": 64, "lr": 1e-3}
    predicted = run.costs.duration(params, 1, EPOCHS)
    assert predicted.basis is Basis.FIT
    truth = LAW(params, Resources(1)) * EXAMPLES_PER_EPOCH * EPOCHS
    assert predicted.mean == pytest.approx(truth, rel=0.1)
    assert predicted.low < truth < predicted.high
    assert run.costs.spent == pytest.approx(sum(t.user_attrs["duration"] for t in run.study.trials), rel=1e-6)
    assert run.costs.typical_run() is not None


def _reporting(epochs: int, times: list[float], started: float = 100.0, stop: str = "") -> RunningTrial:
    study = optuna.create_study()
    config = TrialConfig(study="s", number=0, params={}, seed=0, epochs=epochs)
    reports = [(step, {"loss": 1.0}, at) for step, at in enumerate(times, 1)]
    return RunningTrial(study.ask(), config, 1, 0.0, reports=reports, stop_reason=stop, started_at=started)


def test_a_running_trials_whole_run_is_read_from_its_epochs_after_the_first() -> None:
    """A first epoch of 60 s (a fresh worker's imports) and epochs of 10 s after it: 10 epochs are 60 + 9 x 10 s."""
    one = _reporting(10, [160.0])
    assert from_progress(one) is None  # one report: the start-up and the epoch cannot be told apart
    three = _reporting(10, [160.0, 170.0, 180.0])
    whole = from_progress(three)
    assert whole is not None and whole.low == whole.mean == whole.high == pytest.approx(150.0)  # epochs alike
    assert startup(three) == pytest.approx(50.0)
    stopping = from_progress(_reporting(10, [160.0, 170.0, 180.0], stop="resource budget"))
    assert stopping is not None and stopping.mean == pytest.approx(90.0)  # asked to stop: one more epoch
    resumed = from_progress(_reporting(10, [60.0, 170.0, 180.0]))  # an earlier run's report: not this run's; ...
    assert resumed is not None and resumed.mean == pytest.approx(
        150.0
    )  # ... this run's first (step 2) has its start-up
    assert from_progress(_reporting(3, [160.0, 170.0, 500.0, 510.0])) is None  # steps past its epochs: not epochs


def test_a_trial_with_its_first_epoch_alone_runs_no_longer_than_its_epochs_at_that_epochs_time() -> None:
    """The model has seen runs of 1,000 s; a running trial whose first epoch (start-up included) took 10 s of its
    10 is predicted at 100 s, not at the model's 1,000 (issue 52, 5a: at 64 workers the second wave's trials that
    had reported one epoch were predicted by the fit, too long); one whose first epoch took 200 s, at the model's."""
    costs = TrialCosts()
    for number in range(8):
        costs.model.observe_run(number, {}, Resources(1), 1000.0 + number, full=True)
    quick, slow = _reporting(10, [110.0]), _reporting(10, [300.0])
    fit, bound = costs.wholes([slow])[0], from_first_epoch(quick)
    assert fit.mean == pytest.approx(1003.5, rel=0.01)
    assert bound is not None and bound.mean == pytest.approx(100.0) and bound.low < 100.0 < bound.high
    assert costs.wholes([quick, slow]) == [bound, fit]
    assert from_first_epoch(_reporting(10, [])) is None and from_first_epoch(_reporting(1, [110.0])) is None


def test_a_running_trial_is_expected_to_end_where_the_trials_that_went_as_far_ended() -> None:
    """A scaling sweep's trials stop at their target after 2 to 36 of their 60 epochs (examples/mnist1d-scaling.toml):
    a running trial at its 10th epoch of 2 s is expected to end at the mean of the epochs the trials past 10 ended
    at (12 and 36: 24), not at its 60th, for the expected end; the resource budget's look still takes its last."""
    costs = TrialCosts()
    for ran in (2, 3, 12, 36):  # runs of 60 planned epochs, stopped at the target after `ran`
        run = _reporting(60, [100.0 + 2.0 * epoch for epoch in range(1, ran + 1)])
        costs.ended(run, Outcome(TrialStatus.OK, started=100.0, finished=100.0 + 2.0 * ran, stopped=True))
    costs.ended(  # a failed run is no trial's stop
        _reporting(60, [102.0]), Outcome(TrialStatus.ERROR, started=100.0, finished=102.0)
    )
    at_ten = _reporting(60, [100.0 + 2.0 * epoch for epoch in range(1, 11)])
    assert costs.final_epoch(at_ten) == (24.0, 12.0)
    expected, budgeted = costs.wholes([at_ten], stops=True)[0], costs.wholes([at_ten])[0]
    assert expected.mean == pytest.approx(20.0 + 14 * 2.0) and expected.low < 48.0 < expected.high
    assert budgeted.mean == pytest.approx(120.0)
    past_all = _reporting(60, [100.0 + 2.0 * epoch for epoch in range(1, 41)])  # none went this far: to its last
    assert costs.final_epoch(past_all) is None and costs.wholes([past_all], stops=True)[0].mean == pytest.approx(120.0)


def test_the_model_learns_a_trials_time_per_example_less_its_start_up() -> None:
    """A first epoch of 60 s (a fresh worker's imports) and epochs of 10 s of 1,000 examples after it: the time per
    example is 10 ms, not the 27 ms of 80 s over 3,000 examples; the first report alone teaches nothing (its
    start-up and its epoch cannot be told apart)."""
    costs = TrialCosts()
    running = _reporting(10, [])
    for step, at in enumerate([160.0, 170.0, 180.0], 1):
        metrics = {"loss": 1.0, "examples": 1000.0 * step}
        running.keep_report(step, metrics, at)
        costs.reported(running, at, metrics)
        if step == 1:
            assert costs.model.count(Quantity.PER_EXAMPLE) == 0
    rate = costs.model.predict(Quantity.PER_EXAMPLE, {})
    assert rate.mean == pytest.approx(0.01, rel=0.01)


def _promoted(reports: list[tuple[int, float]], started: float | None = 100.0) -> RunningTrial:
    """Trial 0 of 4 epochs of 1,000 examples, promoted after its first (an elastic trial's rung): its second
    segment, from epoch 1's checkpoint to epoch 4 on 2 slots; ``reports``: (epoch, time), epoch 1's by the first
    run (at 50 s), the others by this one (started at ``started``)."""
    study = optuna.create_study()
    config = TrialConfig(study="s", number=0, params={}, seed=0, epochs=4)
    rows = [(step, {"loss": 1.0, "examples": 1000.0 * step}, at) for step, at in reports]
    segments = [Segment(0, Transition.START, 1, 0, 1, 0), Segment(1, Transition.RESIZE, 2, 1, 4, 1000)]
    return RunningTrial(study.ask(), config, 2, 0.0, reports=rows, started_at=started, segments=segments)


def test_a_promoted_segment_is_predicted_at_its_own_epochs_from_its_own_reports() -> None:
    """Issue 52, 5a on the real examples (digits-elastic: 403% at 25%): a promoted trial's segment runs epochs 2-4
    from its checkpoint, 3 epochs, not 4 from scratch; its own reports (epoch 2 with its ranks' start-up of 2 s,
    epoch 3 a second later) give its run, 3 s + 1 epoch of 1 s; the earlier segment's report (before this run's
    start) made them unreadable, and the model's prediction of 4 whole epochs stood."""
    running = _promoted([(1, 50.0), (2, 103.0), (3, 104.0)])
    assert run_epochs(running) == 3
    whole = from_progress(running)
    assert whole is not None and whole.mean == pytest.approx(5.0)
    assert startup(running) == pytest.approx(2.0)
    bound = from_first_epoch(_promoted([(1, 50.0), (2, 103.0)]))  # this run's first epoch alone: 3 epochs at 3 s
    assert bound is not None and bound.mean == pytest.approx(9.0)


def test_a_segment_that_ended_teaches_the_model_its_own_examples_and_a_queued_one_is_predicted_at_its_epochs() -> None:
    """The segment above ends after epochs 2-4 (3,000 examples in 3 s once its 2 s of start-up are out): the model
    learns 1 ms per example at 2 slots (not 3 s over the 4,000 examples the trial has seen since its start), and
    a queued segment like it (not started) is predicted at its 3 epochs of 1,000 examples: 3 s, not 4."""
    costs = TrialCosts()
    study = optuna.create_study()
    for _ in range(3):  # first segments of one epoch at 2 slots: 1 s for 1,000 examples, no start-up
        config = TrialConfig(study="s", number=0, params={}, seed=0, epochs=1)
        first = RunningTrial(study.ask(), config, 2, 0.0, started_at=100.0)
        first.keep_report(1, {"loss": 1.0, "examples": 1000.0, "epoch_seconds": 1.0}, 101.0)
        costs.ended(first, Outcome(TrialStatus.OK, metrics={"examples": 1000.0}, started=100.0, finished=101.0))
    running = _promoted([(1, 50.0), (2, 103.0), (3, 104.0), (4, 105.0)])
    running.trial = study.ask()
    costs.ended(running, Outcome(TrialStatus.OK, metrics={"examples": 4000.0}, started=100.0, finished=105.0))
    assert costs.model.predict(Quantity.PER_EXAMPLE, {}, Resources(2)).mean == pytest.approx(0.001, rel=0.05)
    queued = _promoted([(1, 50.0)], started=None)
    assert costs.wholes([queued])[0].mean == pytest.approx(3.0, rel=0.05)


def test_a_run_pruned_at_its_first_epoch_is_learnt_less_its_start_up() -> None:
    """ASHA prunes at the first rung (examples/digits-elastic.toml): a run of one report, 3.1 s after its start on a
    fresh worker, whose epoch took 0.1 s by the trainer's ``epoch_seconds``: 3 s of start-up; the model learns
    0.1 s and the trials to start cost that (it learnt the 3.1 s: every trial to start on a warm worker was
    predicted 30 times too long)."""
    costs = TrialCosts()
    pruned = _reporting(4, [])
    pruned.worker = "A"  # its worker's first run: its start-up is the worker's imports, paid once
    pruned.keep_report(1, {"loss": 1.0, "examples": 1000.0, "epoch_seconds": 0.1}, 103.1)
    assert startup(pruned) == pytest.approx(3.0)
    stopped = Outcome(TrialStatus.OK, metrics={"examples": 1000.0}, started=100.0, finished=103.1, stopped=True)
    costs.ended(pruned, stopped)
    assert costs.seen() == [(pytest.approx(0.1), 1)]
    assert costs.model.predict(Quantity.RUN, {}).mean == pytest.approx(0.1, rel=0.05)


def test_a_first_run_on_a_fresh_worker_that_has_not_reported_is_taken_less_the_start_up_fresh_workers_paid() -> None:
    """The digits example on 2 fresh workers under load: the first run on worker A paid 5 s of imports before its
    epochs of 1 s; the first on worker B has run 10 s without a report (its imports). Its 10 s are taken as 5 s of
    imports and 5 of training: the trials to start cost that, not 10 s and more (issue 52, 5a on the real examples:
    130% at 25% of a digits run, the trials to start drawn from a run that was mostly a worker's imports). A run
    on worker A, begun after a run ended there, pays none."""
    costs = TrialCosts()
    first = run_on("A", 0, [106.0 + epoch for epoch in range(10)], 100.0, 10)
    costs.ended(first, Outcome(TrialStatus.OK, started=100.0, finished=115.0))
    fresh, warm = run_on("B", 1, [], 116.0, 10), run_on("A", 1, [], 116.0, 10)
    assert costs.startups([fresh, warm], 126.0) == [5.0, 0.0]
    assert costs.startups([fresh], 119.0) == [3.0]  # at most its seconds so far
    on_fresh, on_warm = costs.eta([fresh], 4, 2, 126.0), costs.eta([warm], 4, 2, 126.0)
    assert on_fresh is not None and on_warm is not None
    assert on_fresh.left.mean < on_warm.left.mean - 3.0  # about 2 rounds of trials to start, each 5 s / 2 less
