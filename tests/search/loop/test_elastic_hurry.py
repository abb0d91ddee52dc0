"""[elastic] grow = "goodput" with ASHA: a trial past the pruner's last rung takes a slot that comes free before
the trials that wait for one, where its result comes sooner than the queue is delayed (the real Campaign loop on
the simulated cluster: virtual time, what a trial does is the model's)."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest

from cluster.simulated import SimulatedExecutor, TrialPlan
from search.loop.campaign import Campaign, Snapshot
from search.session.runner import load_study
from search.spec.campaign_spec import parse_spec
from search.store.folder import CampaignFolder
from search.store.records import Attr
from tests.search.toy_specs import toy_toml

SPEEDUP = {1: 1.0, 2: 1.7, 4: 2.6}  # a ring all-reduce's: each slot added buys less
EXAMPLES, BATCH = 1000, 100  # per epoch; the global batch (fixed): 10 steps an epoch


def hurry_toml(pruner: str | None) -> str:
    """40 trials of 40 epochs on 4 slots, widths [1, 2, 4] by goodput; ASHA (rungs at 1, 4, 16) or no pruner."""
    asha = {"pruner": {"min_resource": 1, "reduction_factor": 4}} if pruner else {}
    return toy_toml(
        "hurry",
        40,
        40,
        seed=3,
        pruner=pruner,
        trainer={"entry": "bench.trivial:fit"},
        space={"x": {"type": "float", "low": 0.0, "high": 1.0}},
        cluster={"n_workers": None},
        top={**asha, "elastic": {"widths": [1, 2, 4], "grow": "goodput"}},
    )


class Ring:
    """An epoch takes 10 s / SPEEDUP[width], a run's start 2 s more; trial 0 scores best at every epoch."""

    def plan(self, config: Mapping[str, Any], rng: np.random.Generator) -> TrialPlan:
        number, start, end = int(config["number"]), int(config["resume_epoch"]), int(config["epochs"])
        epoch = 10.0 / SPEEDUP[int(config["data_parallel"])]
        epochs = range(start + 1, end + 1)
        seconds = tuple(epoch + (2.0 if e == start + 1 else 0.0) for e in epochs)
        metrics = tuple(
            {"score": e / (1.0 + number), "epoch": float(e), "steps": e * EXAMPLES / BATCH, "examples": e * EXAMPLES}
            for e in epochs
        )
        return TrialPlan(seconds, metrics)


def run(tmp_path: Path, pruner: str | None) -> tuple[list[optuna.trial.FrozenTrial], list[tuple[float, int]]]:
    """The trials, and (elapsed, trials not yet sent out) at each progress snapshot."""
    text = hurry_toml(pruner)
    spec = parse_spec(tomllib.loads(text), "hurry.toml", text)
    folder = CampaignFolder(tmp_path / "hurry")
    folder.create(text)
    study = load_study(spec, folder, create=True)
    executor = SimulatedExecutor(1, Ring(), slots_per_worker=4, seed=1, controller_time_scale=0)
    left: list[tuple[float, int]] = []

    def seen(s: Snapshot) -> None:
        left.append((s.elapsed, s.budget - s.complete - s.pruned - s.failed - s.running - s.queued))

    Campaign(spec, folder, study, executor, clock=executor.clock, on_progress=seen).run()
    return study.get_trials(), left


def waiting_at(left: list[tuple[float, int]], t: float) -> int:
    """Trials not yet sent out at the last snapshot before ``t``."""
    return [n for elapsed, n in left if elapsed <= t][-1]


def resizes(trial: optuna.trial.FrozenTrial) -> list[tuple[int, int, float]]:
    """(width, start epoch, start time) of each resized segment."""
    out = []
    for r in trial.user_attrs.get(Attr.SEGMENTS, []):
        if r["transition"] == "resize":
            out.append((r["width"], r["start_epoch"], r["runs"][0][0]))
    return out


@pytest.mark.slow  # two campaigns of 40 trials: ~7 s here
def test_a_trial_past_the_last_rung_widens_while_trials_wait_and_none_does_without_a_rung_pruner(
    tmp_path: Path,
) -> None:
    """ASHA promotes trial 0 at every rung; past the last (16) its 23 epochs left take 10 s each at width 1, and
    by AdaptDL's prior (half a step fixed: 1.33x at width 2, never measured) its result comes 55 s sooner for 125
    extra slot-seconds: with 40 trials / 4^3 rungs (under one expected past the last rung: share 1) on 4 slots it
    takes the next slot that comes free although trials still wait to start. Without a rung pruner no trial is
    sure to finish and none widens while trials wait."""
    trials, left = run(tmp_path / "asha", "asha")
    grown = resizes(trials[0])
    assert trials[0].state is optuna.trial.TrialState.COMPLETE
    assert grown and grown[0][0] == 2 and grown[0][1] > 16, trials[0].user_attrs.get(Attr.SEGMENTS)
    assert waiting_at(left, grown[0][2]) > 0  # trials waited to start when it widened

    plain, left = run(tmp_path / "none", None)
    early = [(t.number, r) for t in plain for r in resizes(t) if waiting_at(left, r[2]) > 0]
    assert early == []
