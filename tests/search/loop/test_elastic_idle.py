"""[elastic] grow = "goodput": slots that sit idle go to running trials by goodput per slot, at their next report
(mid-segment), never to the slots trials wait for or the reserve (the real Campaign loop on the simulated cluster:
virtual time, what a trial does is the model's)."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest

from cluster.goodput import StepTime
from cluster.outcome import Outcome
from cluster.simulated import SimulatedExecutor, TrialPlan
from search.loop.campaign import Campaign
from search.loop.elastic import GROW_STOP, ElasticGrowth, step_times
from search.loop.policies import NextSegment
from search.loop.segments import Segment
from search.loop.trials import RunningTrial
from search.session.runner import load_study
from search.spec.campaign_spec import parse_spec
from search.spec.elastic import ElasticSpec
from search.store.folder import CampaignFolder
from search.store.records import Attr
from search.vocab.terms import Transition
from tests.search.toy_specs import toy_toml
from trainers.api import TrialConfig

X_SPACE = {"x": {"type": "float", "low": 0.0, "high": 1.0}}


def idle_toml(n_trials: int = 4, pruned: bool = False) -> str:
    """``n_trials`` trivial trials of 6 epochs, widths [1, 2, 4] by goodput (reserve 1); ``pruned``: ASHA at rungs
    1 and 2, reserve 0."""
    asha = {"pruner": {"min_resource": 1, "reduction_factor": 2}} if pruned else {}
    elastic = {"widths": [1, 2, 4], "grow": "goodput", "reserve": 0 if pruned else 1}
    return toy_toml(
        "idle",
        n_trials,
        6,
        seed=2,
        pruner="asha" if pruned else None,
        trainer={"entry": "bench.trivial:fit"},
        space=X_SPACE,
        cluster={"n_workers": None},
        top={**asha, "elastic": elastic},
    )


SPEC = idle_toml()

EXAMPLES = 100  # per epoch
BATCH = 10  # the global batch: 10 steps per epoch


class Resumable:
    """Each run goes on from the epoch its checkpoint is at (``resume_epoch``) to its config's ``epochs``; an
    epoch takes ``slow`` seconds for trial 3 and 1 s for the others, divided by the width (no all-reduce cost)."""

    def __init__(self, slow: float) -> None:
        self.slow = slow

    def plan(self, config: Mapping[str, Any], rng: np.random.Generator) -> TrialPlan:
        number, start, end = int(config["number"]), int(config["resume_epoch"]), int(config["epochs"])
        seconds = (self.slow if number == 3 else 1.0) / int(config["data_parallel"])
        epochs = range(start + 1, end + 1)
        metrics = tuple(
            {
                "score": 0.1 * e,
                "epoch": float(e),
                "steps": float(e * EXAMPLES // BATCH),
                "examples": float(e * EXAMPLES),
            }
            for e in epochs
        )
        return TrialPlan(tuple(seconds for _ in epochs), metrics)


def run(tmp_path: Path, text: str, slow: float = 10.0) -> tuple[list[optuna.trial.FrozenTrial], SimulatedExecutor]:
    spec = parse_spec(tomllib.loads(text), "idle.toml", text)
    folder = CampaignFolder(tmp_path / "idle")
    folder.create(text)
    study = load_study(spec, folder, create=True)
    executor = SimulatedExecutor(1, Resumable(slow), slots_per_worker=4, seed=1, controller_time_scale=0)
    Campaign(spec, folder, study, executor, clock=executor.clock).run()
    trials = study.get_trials()
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 4, [t.user_attrs for t in trials]
    return trials, executor


def segments_of(trial: optuna.trial.FrozenTrial) -> list[tuple[str, int, int, int]]:
    return [(r["transition"], r["width"], r["start_epoch"], r["end_epoch"]) for r in trial.user_attrs[Attr.SEGMENTS]]


def test_slots_left_idle_widen_the_trial_still_running_at_its_next_report(tmp_path: Path) -> None:
    """4 trials fill the 4 slots; trials 0-2 end at t = 6 s with none left to start; trial 3 (10 s an epoch) is
    widened into the 3 idle slots at its next report (epoch 1, mid-segment: no rung ends it there) and goes on
    from that checkpoint at 4 slots. Before, nothing grew a trial between rungs, and trials 0-2 grew at their
    first rung whether or not slots were free."""
    trials, executor = run(tmp_path, SPEC)
    for trial in trials[:3]:  # no slot was idle while they ran: one segment each, at 1 slot
        assert Attr.SEGMENTS not in trial.user_attrs and trial.user_attrs[Attr.CONFIG]["data_parallel"] == 1
    slow = trials[3]
    assert segments_of(slow) == [("start", 1, 0, 1), ("resize", 4, 1, 6)]
    history = {step: metrics for step, metrics in slow.user_attrs[Attr.HISTORY]}
    assert sorted(history) == [1, 2, 3, 4, 5, 6]  # each epoch once: none lost, none repeated
    assert [history[e]["examples"] for e in range(1, 7)] == [EXAMPLES * e for e in range(1, 7)]
    assert Attr.STOP_REASON not in slow.user_attrs and Attr.STOP_DECIDED not in slow.user_attrs  # no prune
    assert executor.clock() == pytest.approx(10.0 + 5 * 10.0 / 4)  # 1 epoch at 1 slot, 5 at 4
    busy = [iv for ivs in executor.busy_intervals().values() for iv in ivs]
    assert max(sum(1 for s, e in busy if s <= t < e) for t, _e in busy) <= 4  # never more slots than there are


def test_no_slot_is_idle_beyond_the_reserve_while_trials_wait(tmp_path: Path) -> None:
    """8 trials on 4 slots: while trials wait to start, no running trial is widened; the last ones are."""
    text = idle_toml(8)
    spec = parse_spec(tomllib.loads(text), "idle.toml", text)
    folder = CampaignFolder(tmp_path / "idle8")
    folder.create(text)
    study = load_study(spec, folder, create=True)
    executor = SimulatedExecutor(1, Resumable(10.0), slots_per_worker=4, seed=1, controller_time_scale=0)
    Campaign(spec, folder, study, executor, clock=executor.clock).run()
    trials = study.get_trials()
    assert all(t.state is optuna.trial.TrialState.COMPLETE for t in trials)
    firsts = [
        t.user_attrs[Attr.SEGMENTS][0]["runs"][0][0] if Attr.SEGMENTS in t.user_attrs else t.user_attrs["started"]
        for t in trials
    ]
    last_start = max(firsts)  # when the last trial started
    for trial in trials:
        for segment in trial.user_attrs.get(Attr.SEGMENTS, [])[1:]:
            assert segment["runs"][0][0] >= last_start, segment  # grown only once nothing waited
    assert any(len(t.user_attrs.get(Attr.SEGMENTS, [])) > 1 for t in trials)


# --- the decision, on frozen views ---------------------------------------------------------------


def view(study: optuna.Study, width: int, step_seconds: dict[int, float], epochs: int = 6) -> RunningTrial:
    """A running trial that reported two epochs at each width of ``step_seconds`` (seconds per step there)."""
    trial = study.ask()
    config = TrialConfig(study.study_name, trial.number, {"batch_size": BATCH}, 0, epochs, data_parallel=width)
    running = RunningTrial(trial, config, width, 0.0, started_at=0.0)
    t, epoch = 0.0, 0
    for w, seconds in step_seconds.items():
        if w != width:
            running.segments = [Segment(0, Transition.START, w, 0, epochs), Segment(1, Transition.RESIZE, width, 2, 6)]
        for _ in range(2):
            epoch, t = epoch + 1, t + seconds * EXAMPLES / BATCH
            metrics = {"epoch": float(epoch), "steps": float(epoch * EXAMPLES / BATCH)}
            running.keep_report(epoch, metrics, t)
    return running


def test_idle_slots_go_where_goodput_per_slot_gains_most_and_are_promised_once() -> None:
    study = optuna.create_study()
    growth = ElasticGrowth(ElasticSpec((1, 2, 4), grow="goodput", reserve=1), rungs=(1, 3))
    assert growth.rungs == ()  # goodput without shrink: one segment until a resize
    # trial 0 measured an all-reduce that eats what a second slot buys (speedup 1.05); trial 1 only ran at 1 slot
    comm_bound = view(study, 1, {2: 0.095, 1: 0.1})
    fresh = view(study, 1, {1: 0.1})
    views = [comm_bound.view(), fresh.view()]
    assert growth.widen_idle(views, free=2, waiting=1) == {}  # 1 slot for the waiting trial, 1 for the reserve
    stops = growth.widen_idle(views, free=2, waiting=0)
    assert {n: (s.reason, s.transition) for n, s in stops.items()} == {
        1: (f"{GROW_STOP}: to 2 slots", Transition.RESIZE)
    }  # the comm-bound trial gains less than 0.25 per slot; trial 1 cannot go to 4 with 2 free
    assert growth.widen_idle(views, free=2, waiting=0) == {}  # trial 1's slot is promised: 1 left, not worth it
    # trial 1's segment ends at its next report (epoch 3, its checkpoint): it goes on from there, 3..6
    fresh.stop(stops[1])
    fresh.keep_report(3, {"epoch": 3.0, "steps": 30.0}, 7.0)
    step = growth.on_finished(fresh.view(), Outcome("ok", started=0.0, finished=7.0))
    assert isinstance(step, NextSegment)
    assert (step.segment.transition, step.segment.width, step.segment.start_epoch, step.config.epochs) == (
        Transition.CONTINUE, 1, 3, 6,
    )  # fmt: skip
    # at its boundary the room decides: its own slot and 3 free ones, nothing waiting -> 1 -> 2 -> 4
    assert growth.fit_room(fresh.view(), step, free=3, waiting=0).segment.width == 2  # 3 slots: 4 does not fit
    wide = growth.fit_room(fresh.view(), step, free=4, waiting=0)
    assert (wide.segment.transition, wide.segment.width, wide.segment.start_epoch) == (Transition.RESIZE, 4, 3)
    assert wide.config.data_parallel == 4 and wide.config.epochs == 6
    assert growth.fit_room(fresh.view(), step, free=4, waiting=2).segment.width == 1  # trials wait: no growth


def test_promotion_mode_does_not_grow_into_idle_slots() -> None:
    growth = ElasticGrowth(ElasticSpec((1, 2), reserve=0), rungs=(1,))
    study = optuna.create_study()
    assert growth.widen_idle([view(study, 1, {1: 0.1}).view()], free=4, waiting=0) == {}
    assert not growth.has_spare(4, 0)


PRUNED_SPEC = idle_toml(2, pruned=True)


class Scored(Resumable):
    """Trial 0 scores 1.0 an epoch, 1 s an epoch; trial 1 scores 0.1, 2 s an epoch (divided by the width)."""

    def plan(self, config: Mapping[str, Any], rng: np.random.Generator) -> TrialPlan:
        plan = super().plan(config, rng)
        number, width = int(config["number"]), int(config["data_parallel"])
        score = 1.0 if number == 0 else 0.1
        metrics = tuple({**m, "score": score * m["epoch"]} for m in plan.metrics)
        return TrialPlan(tuple((1.0 + number) / width for _ in metrics), metrics)


def test_trials_widen_into_slots_idle_from_the_start_and_a_prune_at_the_stop_report_wins(tmp_path: Path) -> None:
    """2 trials on 4 slots: both are widened once they have started (2 idle slots, nothing waits). Trial 1's
    resize stop lands on its report at ASHA's first rung, where it is pruned (trial 0 was better there): it ends
    PRUNED, not resized; before, a trial asked to stop for any reason was no longer asked to the pruner."""
    spec = parse_spec(tomllib.loads(PRUNED_SPEC), "idle.toml", PRUNED_SPEC)
    folder = CampaignFolder(tmp_path / "pruned")
    folder.create(PRUNED_SPEC)
    study = load_study(spec, folder, create=True)
    executor = SimulatedExecutor(1, Scored(1.0), slots_per_worker=4, seed=1, controller_time_scale=0)
    Campaign(spec, folder, study, executor, clock=executor.clock).run()
    best, worse = study.get_trials()
    assert best.state is optuna.trial.TrialState.COMPLETE
    assert segments_of(best)[:2] == [("start", 1, 0, 1), ("resize", 2, 1, 6)]
    assert worse.state is optuna.trial.TrialState.PRUNED, worse.user_attrs
    assert worse.user_attrs[Attr.CONFIG]["data_parallel"] == 1 and sorted(worse.intermediate_values) == [1]


def test_a_one_epoch_segment_is_measured_by_its_trainers_epoch_seconds_not_left_out() -> None:
    """Segments of one epoch each (a rung at every epoch) have no two reports of a width: the trainer's
    ``epoch_seconds`` over the epoch's steps measures them, start-up left out; without it the old rule stands."""
    study = optuna.create_study()
    config = TrialConfig(study.study_name, 0, {"batch_size": BATCH}, 0, 3, data_parallel=2)
    running = RunningTrial(study.ask(), config, 2, 0.0, started_at=0.0)
    running.segments = [Segment(0, Transition.START, 1, 0, 1), Segment(1, Transition.RESIZE, 2, 1, 3)]
    running.keep_report(1, {"epoch": 1.0, "steps": 10.0, "epoch_seconds": 2.0}, 5.0)  # 3 s of it start-up
    running.keep_report(2, {"epoch": 2.0, "steps": 20.0, "epoch_seconds": 1.5}, 12.0)  # 5.5 s: the restart
    measured = step_times(running.view(), BATCH, grows=False, start_width=1)
    assert measured == [StepTime(1, BATCH, 0.2), StepTime(2, BATCH / 2, 0.15)]
    running.keep_report(3, {"epoch": 3.0, "steps": 30.0}, 14.0)  # no epoch_seconds: between reports of one width
    assert step_times(running.view(), BATCH, grows=False, start_width=1)[2:] == [StepTime(2, BATCH / 2, 0.2)]
