"""Placement that finishes in time (issue 52, point 3) for a trial that resumes: a resumed campaign's trial left at
epoch ``k`` of ``n`` (its checkpoint, from its earlier reports) is predicted for the ``(n - k) / n`` of its run it has
left, as the job walltime's rule predicts it (:func:`cluster.walltimes.left_share`): near the end of a time budget it
starts when that rest fits and not when it does not, and the longest-first order ranks it by that rest. Real
campaigns (``hypersweep resume``'s path: a study with a trial left RUNNING) on the simulated cluster."""

from __future__ import annotations

import tomllib
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from toy_specs import toy_toml

from cluster.sim_models import CurveModel
from cluster.simulated import SimulatedExecutor
from cluster.trial_cost import LogLinearLaw, Resources
from search.compat import optuna_private as op
from search.loop.campaign import Campaign
from search.loop.trial_maker import TrialMaker
from search.session.runner import load_study
from search.spec.campaign_spec import parse_spec
from search.store.folder import CampaignFolder
from search.store.records import TrialRecord, append_metrics_line

LAW = LogLinearLaw.power(0.2, batch_size=-0.7)  # seconds per example: batch 16 ~ 287 s, 64 ~ 109 s, 256 ~ 41 s
SPACE = {"batch_size": {"type": "int", "low": 16, "high": 512, "log": True}}
EPOCHS, PER_EPOCH = 10, 1000


def full_run(batch_size: int) -> float:
    return LAW({"batch_size": batch_size}, Resources(1)) * EPOCHS * PER_EPOCH


def resumed_campaign(
    tmp_path: Path, left_at: int, enqueued: list[int], lines: list[str], time_budget: float, **study_keys: object
) -> Campaign:
    """A campaign resumed with trial 0 (batch size 16) left RUNNING after ``left_at`` epochs (each checkpointed),
    then ``enqueued`` batch sizes to ask; its trial model knows the law, as from earlier trials."""
    text = toy_toml(
        "place", 1 + len(enqueued), EPOCHS, seed=4, space=SPACE, metric="accuracy", time_budget=time_budget,
        dispatch_ahead=7, batch_trials=1, **study_keys,
    )  # fmt: skip
    spec = parse_spec(tomllib.loads(text), "place.toml", text, check_trainer=False)  # simulated: no trainer runs
    folder = CampaignFolder(tmp_path / "place")
    folder.create(text)
    study = load_study(spec, folder, create=True)
    study.enqueue_trial({"batch_size": 16})
    left = study.ask()  # an earlier controller's trial, left running (killed): resume runs it again
    left.suggest_int("batch_size", 16, 512, log=True)
    for epoch in range(1, left_at + 1):
        append_metrics_line(folder.trial_metrics_file(left.number), epoch, {"epoch": float(epoch)}, float(epoch))
    for batch_size in enqueued:
        study.enqueue_trial({"batch_size": batch_size})
    model = CurveModel(seed=1, jitter=0.0, per_example=LAW, examples_per_epoch=PER_EPOCH)
    executor = SimulatedExecutor(1, model, controller_time_scale=0)
    run = Campaign(spec, folder, study, executor, clock=executor.clock, on_notice=lines.append)
    earlier = [
        TrialRecord(
            100 + i, TrialState.COMPLETE, {"batch_size": b}, (0.5,), config={"epochs": EPOCHS}, width=1,
            duration=full_run(b), metrics={"examples": float(EPOCHS * PER_EPOCH)},
        )
        for i, b in enumerate([16, 32, 64, 128, 256, 512, 20, 40, 80, 160])
    ]  # fmt: skip
    run.costs.load(earlier)
    return run


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("left_at", "starts"), [(8, True), (2, False)])
def test_a_resumed_trial_starts_near_the_end_of_the_time_budget_when_what_it_has_left_fits(
    tmp_path: Path, left_at: int, starts: bool
) -> None:
    """Its full run (~287 s) is longer than the 150 s budget; at epoch 8 of 10 its rest (~57 s) fits, at epoch 2
    (~230 s) it does not: refused, one line naming the epochs it has left."""
    assert full_run(16) > 150.0 > 0.2 * full_run(16) and 0.8 * full_run(16) > 150.0
    lines: list[str] = []
    run = resumed_campaign(tmp_path, left_at, [], lines, time_budget=150.0)
    run.run()
    trial = run.study.trials[0]
    if starts:
        assert "started" in trial.user_attrs and not lines
    else:
        assert "started" not in trial.user_attrs and trial.state == TrialState.PRUNED
        assert len(lines) == 1 and "no more trials start" in lines[0]
        said = "trial 0 is predicted to take 3m50s for epochs 3-10 (it resumes at epoch 2) but the time budget has"
        assert lines[0].startswith(f"{said} 2m30s left")  # 0.8 of its ~287 s run


@pytest.mark.timeout(120)
def test_the_longest_first_order_ranks_a_resumed_trial_by_what_it_has_left(tmp_path: Path) -> None:
    """Batch 16 left at epoch 8 of 10 has ~57 s left: after batch 64's ~109 s, before batch 256's ~41 s (by its full
    run, ~287 s, it would go first)."""
    lines: list[str] = []
    run = resumed_campaign(tmp_path, 8, [256, 64], lines, time_budget=1e6)
    run.run()
    trials = sorted(run.study.trials, key=lambda t: t.user_attrs["started"])
    assert [t.params["batch_size"] for t in trials] == [64, 16, 256]
    assert not lines


def test_a_resumed_trial_takes_what_it_has_left_of_the_slot_hours_budget(tmp_path: Path) -> None:
    """``[study] slot_hours``: each trial launched takes one trial's predicted cost until the next look; the resumed
    trial at epoch 8 of 10 (configured by the real :class:`TrialMaker`, from its earlier reports) takes 0.2 of it."""
    run = resumed_campaign(tmp_path, 8, [], [], time_budget=0.0, slot_hours=1.0)
    run.gates.open(run.study, run.executor.slots(), 0.0)
    run.gates.look([], 0.0)
    resources = run.gates.resources
    assert resources is not None
    one_trial, before = run.costs.per_trial().mean, resources.left()
    spec = run.spec
    maker = TrialMaker(spec.study, spec.trainer, spec.space, run.folder, run.study, run.ledger, None)
    left = run.study.get_trials(deepcopy=False)[0]  # RUNNING: as resume reopens it
    resumed = maker.configure(optuna.Trial(run.study, op.frozen_id(run.study, left)), 0)
    try:
        assert resumed.start_epoch == 8
        run.gates.took([resumed])
        assert resources.left() == pytest.approx(before - 0.2 * one_trial)
    finally:
        maker.close()
        run.executor.close()
        run.sinks.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("left_at", "fits"), [(8, True), (2, False)])
def test_a_trial_queued_behind_a_resumed_run_waits_for_what_that_run_has_left(
    tmp_path: Path, left_at: int, fits: bool
) -> None:
    """One slot, taken by the resumed trial (batch 16, sent to resume at ``left_at``); batch 64 (~109 s) would queue
    behind it in a 200 s budget: it fits when the resumed run has ~57 s left (epoch 8), not ~230 s (epoch 2). Its
    full run (~287 s) would refuse it either way."""
    run = resumed_campaign(tmp_path, left_at, [64], [], time_budget=200.0)
    spec, study = run.spec, run.study
    maker = TrialMaker(spec.study, spec.trainer, spec.space, run.folder, study, run.ledger, None)
    try:
        left = study.get_trials(deepcopy=False)[0]
        resumed = maker.configure(optuna.Trial(study, op.frozen_id(study, left)), 0)
        run.dispatch.launch([resumed], run.dispatch.plan(0.0))
        assert [r.start_epoch for r in run.dispatch.running.values()] == [left_at]
        asked = study.ask()
        asked.suggest_int("batch_size", 16, 512, log=True)
        fresh = maker.configure(asked, 0, fresh=True)
        assert fresh.start_epoch == 0 and run.gates.placement is not None
        assert run.gates.placement.fits([fresh], run.dispatch.running.values(), run.executor.clock()) is fits
    finally:
        maker.close()
        run.executor.close()
        run.sinks.close()


@pytest.mark.timeout(120)
def test_the_resource_budget_commits_a_resumed_run_for_what_it_has_left(tmp_path: Path) -> None:
    """``[study] slot_hours``: the budget's look counts a running trial's committed cost from the epoch its run was
    sent to resume at, as the placement predicts it (one helper, :meth:`TrialCosts.rests`): the resumed trial at
    epoch 8 of 10 commits ~0.2 of its ~287 s run, not all of it."""
    run = resumed_campaign(tmp_path, 8, [], [], time_budget=0.0, slot_hours=1.0)
    spec, study = run.spec, run.study
    maker = TrialMaker(spec.study, spec.trainer, spec.space, run.folder, study, run.ledger, None)
    try:
        left = study.get_trials(deepcopy=False)[0]
        resumed = maker.configure(optuna.Trial(study, op.frozen_id(study, left)), 0)
        run.dispatch.launch([resumed], run.dispatch.plan(0.0))
        run.gates.open(study, run.executor.slots(), 0.0)
        resources = run.gates.resources
        assert resources is not None
        assert resources.look(run.dispatch.running.values(), run.executor.clock()) == []
        committed = resources.limit - run.costs.spent - resources.left()
        assert committed == pytest.approx(0.2 * full_run(16), rel=0.05)
    finally:
        maker.close()
        run.executor.close()
        run.sinks.close()
