"""A trial's next run (its next segment, a retry from its checkpoint) goes through the gates its first run went
through (issue 52, points 2 and 3): with a time budget, it starts only when what it has left, from the epoch it
resumes at, is predicted to end in the time left; with a resource budget, only when what it has left is predicted
to fit in what is left. One that does not is held: not started, one line names it, it stays RUNNING (resumable,
``status`` and the report count it HELD) and ``resume`` with more budget continues it from its checkpoint, no
epoch trained twice. Real campaigns on the simulated cluster (virtual time; what a trial does is the model's)."""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from cluster.executor import Outcome, TrialRequest
from cluster.simulated import _FAIL, SimulatedExecutor, TrialPlan
from search.loop.campaign import Campaign
from search.loop.hooks import CampaignHooks
from search.loop.policies import Decision, NextSegment
from search.loop.segments import Segment, Stop, following, segment_config
from search.loop.trials import RunningTrial, TrialView
from search.reports.status import status_text
from search.session.runner import load_study
from search.spec.campaign_spec import parse_spec
from search.store.folder import CampaignFolder
from search.store.records import Attr, TrialRecord, read_metrics_lines, state_name
from search.vocab.terms import Transition
from tests.search.toy_specs import toy_toml
from trainers.api import TrialConfig

EPOCHS, EPOCH_SECONDS, EXAMPLES = 10, 10.0, 1000


class Epochs:
    """TEST trial model: every epoch takes ``seconds`` and 1000 examples; a run resumes at the epoch it is given."""

    def __init__(self, seconds: float = EPOCH_SECONDS) -> None:
        self.seconds = seconds

    def plan(self, config: Mapping[str, Any], rng: np.random.Generator) -> TrialPlan:
        epochs = range(int(config["resume_epoch"]) + 1, int(config["epochs"]) + 1)
        metrics = tuple({"score": e / 10, "epoch": float(e), "examples": float(e * EXAMPLES)} for e in epochs)
        return TrialPlan(tuple(self.seconds for _ in epochs), metrics)


class SegmentAt:
    """TEST policy: a trial's first segment ends at epoch ``rung``; it goes on in a second one at its width (as an
    elastic trial promoted at a rung, or a PBT member's next interval)."""

    def __init__(self, rung: int) -> None:
        self.rung = rung

    def first_segment(self, config: TrialConfig) -> TrialConfig:
        return dataclasses.replace(config, epochs=self.rung, schedule_epochs=config.schedule_epochs or config.epochs)

    def on_report(self, running: TrialView, metrics: Mapping[str, float]) -> Stop | None:
        return None

    def on_finished(self, running: TrialView, outcome: Outcome) -> Decision:
        config = running.config
        if not outcome.ok or running.stop_reason or config.epochs != self.rung:
            return None
        rest = segment_config(config, running.width, {}, config.schedule_epochs or EPOCHS)
        return NextSegment(rest, following(running.segment(), Transition.CONTINUE, config, rest, running.examples()))


class LosesFirstRun(SimulatedExecutor):
    """The simulated cluster, whose worker dies ``at`` seconds into trial 0's first run (a lost worker); epochs of
    ``seconds``."""

    def __init__(self, at: float, seconds: float) -> None:
        super().__init__(1, Epochs(seconds), seed=1, controller_time_scale=0, recovery_seconds=1.0)
        self._lose_at = at

    def _start(self, request: TrialRequest, worker: int, now: float) -> None:
        first = request.number not in self._attempts
        super()._start(request, worker, now)
        if first and request.number == 0:
            self._push(now + self._lose_at, _FAIL, (0, id(self._runs[0])))


def campaign(
    tmp_path: Path,
    executor: SimulatedExecutor,
    lines: list[str],
    rung: int | None,
    resume: bool = False,
    trainer: Mapping[str, Any] | None = None,
    **study: object,
) -> Campaign:
    """One trial of 10 epochs (in two segments, with ``rung``), on ``executor``; ``resume``: the same folder again."""
    text = toy_toml("gates", 1, EPOCHS, seed=2, metric="score", trainer=trainer, **study)
    spec = parse_spec(tomllib.loads(text), "gates.toml", text, check_trainer=False)
    folder = CampaignFolder(tmp_path / "gates")
    if not resume:
        folder.create(text)
    study_ = load_study(spec, folder, create=not resume)
    hooks = CampaignHooks(policies=[SegmentAt(rung)] if rung else [])
    return Campaign(spec, folder, study_, executor, clock=executor.clock, on_notice=lines.append, hooks=hooks)


def epochs_reported(run: Campaign) -> list[int]:
    return [step for step, _metrics, _at in read_metrics_lines(run.folder.trial_metrics(0))]


def held(run: Campaign) -> optuna.trial.FrozenTrial:
    """Trial 0, held: RUNNING (resumable), counted HELD, with the line that said why."""
    trial = run.study.get_trials()[0]
    assert trial.state == TrialState.RUNNING and state_name(trial) == "HELD"
    assert TrialRecord.of(trial).state_name == "HELD"
    return trial


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_later_segment_predicted_past_the_time_budget_is_held_and_resume_continues_it(tmp_path: Path) -> None:
    """Segment 1 (epochs 1-2, 20 s) fits a 50 s budget; at its end segment 2 (epochs 3-10, ~80 s predicted from the
    trial's own seconds per example) does not fit the ~30 s left: not started, one line, held at epoch 2 (not
    PRUNED by the budget's end as before). A resume with a new time budget continues it at epoch 3: epochs 1-10
    each reported once."""
    lines: list[str] = []
    executor = SimulatedExecutor(1, Epochs(), seed=1, controller_time_scale=0)
    run = campaign(tmp_path, executor, lines, rung=2, time_budget=50.0)
    run.run()
    trial = held(run)
    assert len(run.study.get_trials()) == 1  # held, it keeps its place in the trial budget: none asked instead
    assert epochs_reported(run) == [1, 2]
    assert len(lines) == 1
    assert lines[0].startswith("trial 0's next run is predicted to take 1m20s") and "for epochs 3-10" in lines[0]
    assert "time budget has 30s left: it is not started and is held at epoch 2" in lines[0]
    assert "hypersweep resume" in lines[0] and trial.user_attrs[Attr.HELD] == lines[0]
    assert [s["start_epoch"] for s in trial.user_attrs[Attr.SEGMENTS]] == [0, 2]  # its next segment, recorded
    shown = status_text(run.folder.root)
    assert "1 held" in shown and f"trial 0: held: {lines[0]}" in shown and "hypersweep resume" in shown

    again = SimulatedExecutor(1, Epochs(), seed=1, controller_time_scale=0)
    resumed = campaign(tmp_path, again, [], rung=2, resume=True, time_budget=500.0)
    resumed.run()
    trial = resumed.study.get_trials()[0]
    assert trial.state == TrialState.COMPLETE and not trial.user_attrs[Attr.HELD]
    assert epochs_reported(resumed) == list(range(1, EPOCHS + 1))  # nothing trained twice, nothing lost


@pytest.mark.timeout(120)
def test_a_retry_from_its_checkpoint_predicted_past_the_time_budget_is_held(tmp_path: Path) -> None:
    """Epochs of 5 s, a checkpoint every 5; the model knows 10-epoch runs of 50 s, so the run starts in a 60 s budget.
    Its worker dies at 44 s (epoch 8 reported, epoch 5 checkpointed): the retry has epochs 6-10 (~25 s) left and
    the budget ~16 s: held at epoch 5, not retried (and then PRUNED at the budget's end, as before)."""
    lines: list[str] = []
    trainer = {"checkpoint_every": 5}
    run = campaign(tmp_path, LosesFirstRun(at=44.0, seconds=5.0), lines, None, trainer=trainer, time_budget=60.0)
    learn_ten_epoch_runs(run, 5.0)
    run.run()
    held(run)
    assert epochs_reported(run) == list(range(1, 9))
    assert len(lines) == 1 and lines[0].startswith("trial 0's next run is predicted to take 25s")
    assert "for epochs 6-10 but the time budget has 16s left" in lines[0] and "held at epoch 5" in lines[0]


@pytest.mark.timeout(120)
def test_a_later_segment_that_fits_the_time_left_starts(tmp_path: Path) -> None:
    """The same campaign with a 150 s budget: segment 2 (~80 s) fits the ~130 s left and the trial completes."""
    lines: list[str] = []
    executor = SimulatedExecutor(1, Epochs(), seed=1, controller_time_scale=0)
    run = campaign(tmp_path, executor, lines, rung=2, time_budget=150.0)
    run.run()
    assert run.study.get_trials()[0].state == TrialState.COMPLETE and not lines


@pytest.mark.timeout(120)
def test_a_later_segment_whose_cost_does_not_fit_the_resource_budget_is_held(tmp_path: Path) -> None:
    """``slot_hours`` of 70 slot-seconds: segment 1 costs 20, segment 2 (~80 predicted) does not fit what is left:
    held at epoch 2, where before it ran until the budget's look stopped it (PRUNED, its epochs lost)."""
    lines: list[str] = []
    executor = SimulatedExecutor(1, Epochs(), seed=1, controller_time_scale=0)
    run = campaign(tmp_path, executor, lines, rung=2, slot_hours=70.0 / 3600)
    run.run()
    held(run)
    assert len(run.study.get_trials()) == 1
    assert epochs_reported(run) == [1, 2]
    said = [line for line in lines if "trial 0's next run" in line]
    assert len(said) == 1 and said[0].startswith("[study] slot_hours = 0.0194444: ")
    assert "trial 0's next run (epochs 3-10) is expected to cost 0.0222" in said[0]


def test_the_resource_gate_asks_a_later_run_for_what_it_has_left_not_a_whole_trial(tmp_path: Path) -> None:
    """A trial in its second segment (epochs 9-10 of 10) asks the resource budget for its 2 epochs (~20
    slot-seconds), not a whole trial's ~100: it fits in 50 slot-seconds left, and not in 15."""
    for limit, fits in ((50.0, True), (15.0, False)):
        executor = SimulatedExecutor(1, Epochs(), seed=1, controller_time_scale=0)
        run = campaign(tmp_path / str(limit), executor, [], rung=8, slot_hours=limit / 3600)
        try:
            learn_ten_epoch_runs(run)
            run.gates.open(run.study, executor.slots(), 0.0)
            resources = run.gates.resources
            assert resources is not None and resources.left() == limit and run.costs.per_trial().mean > 90
            trial = run.study.ask()
            trial.suggest_float("quality", 0.0, 1.0)
            config = TrialConfig(study="gates", number=trial.number, params={"quality": 0.5}, seed=1, epochs=EPOCHS)
            running = RunningTrial(
                trial, config, 1, 0.0, segments=[Segment(0, "start", 1, 0, 8), Segment(1, "continue", 1, 8, 10)]
            )
            refused = run.gates.refuses(running, config, 8)
            assert (refused == "") is fits
            if fits:
                assert resources.left() == pytest.approx(limit - 20.0, rel=0.05)  # it took its 2 epochs' cost
            else:
                assert "trial 0's next run (epochs 9-10) is expected to cost 0.00556" in refused
        finally:
            run.executor.close()
            run.sinks.close()


def learn_ten_epoch_runs(run: Campaign, seconds: float = EPOCH_SECONDS) -> None:
    """The trial model learns 10-epoch runs of epochs of ``seconds`` (as from earlier trials)."""
    run.costs.load(
        TrialRecord(
            100 + i, TrialState.COMPLETE, {"quality": q}, (0.5,), config={"epochs": EPOCHS}, width=1,
            duration=EPOCHS * seconds, metrics={"examples": float(EPOCHS * EXAMPLES)},
        )
        for i, q in enumerate([0.1, 0.3, 0.5, 0.7, 0.9, 0.2, 0.4, 0.6, 0.8, 0.95])
    )  # fmt: skip


PBT_SPEC = toy_toml(
    "members",
    4,
    6,
    seed=2,
    scheduler="pbt",
    pruner="none",
    metric="score",
    time_budget=50.0,
    trainer={"entry": "bench.trivial:fit"},
    space={"x": {"type": "float", "low": 0.0, "high": 1.0}},
    cluster={"slots_per_worker": 4},
    top={"pbt": {"interval": 2, "quantile": 0.25, "resample_probability": 0.0, "hyperparams": ["x"]}},
)


class Checkpointed(Epochs):
    """:class:`Epochs` that leaves a checkpoint file in the trial's folder, as a trainer does (a PBT exploit copies
    it)."""

    def plan(self, config: Mapping[str, Any], rng: np.random.Generator) -> TrialPlan:
        where = Path(str(config["checkpoint_dir"]))
        where.mkdir(parents=True, exist_ok=True)
        (where / "checkpoint.pt").write_bytes(b"state")
        return super().plan(config, rng)


def pbt_campaign(tmp_path: Path, lines: list[str], time_budget: float, resume: bool = False) -> Campaign:
    text = PBT_SPEC.replace("time_budget = 50.0", f"time_budget = {time_budget}")
    spec = parse_spec(tomllib.loads(text), "members.toml", text, check_trainer=False)  # runs are simulated
    folder = CampaignFolder(tmp_path / "members")
    if not resume:
        folder.create(text)
    study = load_study(spec, folder, create=not resume)
    executor = SimulatedExecutor(1, Checkpointed(), slots_per_worker=4, seed=1, controller_time_scale=0)
    return Campaign(spec, folder, study, executor, clock=executor.clock, on_notice=lines.append)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_pbt_population_whose_next_segment_does_not_fit_is_held_together_and_resume_continues_it(
    tmp_path: Path,
) -> None:
    """4 members of 6 epochs in intervals of 2 (20 s) on 4 slots, a 50 s budget: the second interval fits the 30 s
    left at rung 2, the third not the 10 s left at rung 4. The first member released there is held, and its
    population with it (no member waits for ever at a rung that cannot be decided); before, the third interval
    started and the budget's end PRUNED every member. A resume continues all four from epoch 4."""
    lines: list[str] = []
    run = pbt_campaign(tmp_path, lines, 50.0)
    run.run()
    trials = run.study.get_trials()
    assert [state_name(t) for t in trials] == ["HELD"] * 4
    assert len(lines) == 2 and "for epochs 5-6 but the time budget has 10s left" in lines[0]
    assert "population waits for it" in lines[1]
    resumed = pbt_campaign(tmp_path, [], 500.0, resume=True)
    resumed.run()
    assert [t.state for t in resumed.study.get_trials()] == [TrialState.COMPLETE] * 4
    for number in range(4):
        reported = [step for step, _m, _at in read_metrics_lines(resumed.folder.trial_metrics(number))]
        assert reported == list(range(1, 7)), number


class Killed(BaseException):
    """TEST: the controller dies (raised where it decides a refusal, before anything of it is written)."""


@pytest.mark.timeout(120)
def test_a_controller_stopped_as_it_refuses_a_segment_leaves_it_resumable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller stops at the moment it decides on segment 2 (its record on disk, no hold written): the trial
    stays RUNNING in segment 2, and a resume with more time continues it at epoch 3, every epoch reported once."""
    executor = SimulatedExecutor(1, Epochs(), seed=1, controller_time_scale=0)
    run = campaign(tmp_path, executor, [], rung=2, time_budget=50.0)

    def killed(*_args: object) -> str:
        raise Killed()

    monkeypatch.setattr(run.gates, "refuses", killed)
    with pytest.raises(Killed):
        run.run()
    trial = run.study.get_trials()[0]
    assert trial.state == TrialState.RUNNING and Attr.HELD not in trial.user_attrs
    assert [s["start_epoch"] for s in trial.user_attrs[Attr.SEGMENTS]] == [0, 2]
    again = SimulatedExecutor(1, Epochs(), seed=1, controller_time_scale=0)
    resumed = campaign(tmp_path, again, [], rung=2, resume=True, time_budget=500.0)
    resumed.run()
    assert resumed.study.get_trials()[0].state == TrialState.COMPLETE
    assert epochs_reported(resumed) == list(range(1, EPOCHS + 1))


@pytest.mark.slow
def test_a_retry_and_a_later_segment_reach_the_executor_with_the_epoch_they_resume_at(tmp_path: Path) -> None:
    """The job walltime's rule is the executor's (:mod:`cluster.walltimes`, at the slot runners, for every request):
    a retry from epoch 5's checkpoint and a segment begun at epoch 2 are sent with ``start_epoch`` 5 and 2, so the
    rule predicts what they have left, as for a resumed campaign's trial."""
    for executor, rung, trainer, resumed in (
        (LosesFirstRun(at=44.0, seconds=5.0), None, {"checkpoint_every": 5}, 5),
        (SimulatedExecutor(1, Epochs(), seed=1, controller_time_scale=0), 2, None, 2),
    ):
        sent: list[int] = []
        submit = executor.submit

        def recorded(request: TrialRequest, submit: Any = submit, sent: list[int] = sent) -> None:
            sent.append(request.start_epoch)
            submit(request)

        executor.submit = recorded  # type: ignore[method-assign]
        run = campaign(tmp_path / str(resumed), executor, [], rung, trainer=trainer)
        run.run()
        assert run.study.get_trials()[0].state == TrialState.COMPLETE and sent == [0, resumed]
