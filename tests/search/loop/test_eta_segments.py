"""The expected end of a campaign whose trials run in segments (issue 52, point 1): ``[elastic]`` promotions at
ASHA's rungs on the simulated cluster, with known epochs and a known restart per run."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from toy_specs import toy_toml

from cluster.outcome import Outcome, TrialStatus
from cluster.simulated import SimulatedExecutor, TrialPlan
from search.loop.campaign import Campaign, Snapshot
from search.loop.costs import TrialCosts
from search.session.runner import load_study
from search.spec.campaign_spec import parse_spec
from search.store.folder import CampaignFolder
from tests.search.loop.runs import run_on

EPOCH = 1.0  # seconds of an epoch's training
RESTART = 4.0  # seconds every run pays before its first epoch (its ranks' start-up, the checkpoint's load)


class Restarting:
    """Each run goes on from its trial's checkpoint (the epoch its last run ended at) to its config's ``epochs``: a
    restart of :data:`RESTART` s, then :data:`EPOCH` s per epoch (``epoch_seconds``, as the built-in trainer
    reports it); the score grows with ``x``, so ASHA promotes the best ``x`` seen at each rung."""

    def __init__(self) -> None:
        self.at: dict[int, int] = {}

    def plan(self, config: Mapping[str, Any], rng: np.random.Generator) -> TrialPlan:
        number, end, x = int(config["number"]), int(config["epochs"]), float(config["params"]["x"])
        epochs = range(self.at.get(number, 0) + 1, end + 1)
        self.at[number] = end
        metrics = tuple(
            {"score": x * e, "epoch": float(e), "examples": 100.0 * e, "epoch_seconds": EPOCH} for e in epochs
        )
        seconds = tuple(EPOCH + (RESTART if i == 0 else 0.0) for i in range(len(epochs)))
        return TrialPlan(seconds, metrics)


def run_elastic(tmp_path: Path, n_trials: int, slots: int) -> list[Snapshot]:
    """``n_trials`` trials of 8 epochs, ASHA at rungs 1, 2 and 4 (reduction factor 2), segments at the rungs."""
    text = toy_toml(
        "rungs",
        n_trials,
        8,
        seed=3,
        pruner="asha",
        trainer={"entry": "bench.trivial:fit"},
        space={"x": {"type": "float", "low": 0.0, "high": 1.0}},
        cluster={"n_workers": None},
        top={
            "pruner": {"min_resource": 1, "reduction_factor": 2},
            "elastic": {"widths": [1, 2], "reserve": 0, "min_gain": 1.0},  # never worth a grow: width 1 throughout
        },
    )
    spec = parse_spec(tomllib.loads(text), "rungs.toml", text)
    folder = CampaignFolder(tmp_path / "rungs")
    folder.create(text)
    executor = SimulatedExecutor(1, Restarting(), slots_per_worker=slots, seed=1, controller_time_scale=0)
    seen: list[Snapshot] = []
    study = load_study(spec, folder, create=True)
    Campaign(spec, folder, study, executor, clock=executor.clock, on_progress=seen.append).run()
    return seen


@pytest.mark.timeout(120)
def test_the_expected_end_counts_the_segments_promoted_trials_have_left_and_their_restarts(tmp_path: Path) -> None:
    """8 trials on 4 slots: what is left is mostly the promoted trials' later segments (1 -> 2 -> 4 -> 8 epochs,
    each a restart of 4 s and its epochs). The old expected end took each running trial to end at its rung, and
    learnt the restarts out of every run as a fresh worker's imports: 2 s, 4 s and 0 s left at 25%, 50% and 75%
    of the 39 s campaign, against 29 s, 19 s and 9 s."""
    seen = run_elastic(tmp_path, n_trials=8, slots=4)
    end = seen[-1].elapsed
    assert end > 30.0  # three rungs of promotions, each segment at least a restart and an epoch
    for fraction in (0.25, 0.5, 0.75):
        s = next(s for s in seen if s.elapsed >= fraction * end and s.eta is not None)
        assert s.eta is not None
        left = end - s.elapsed
        assert abs(s.eta.left.mean - left) <= 0.15 * left, (fraction, s.elapsed, s.eta.left, left)
        assert s.eta.left.low <= left + 1.0 and left - 1.0 <= s.eta.left.high, (fraction, s.eta.left, left)


def test_a_restart_is_learnt_apart_from_a_fresh_worker_s_imports_and_every_run_pays_it() -> None:
    """Worker A's first run paid 5 s of imports before its epochs of 1 s; the next run there paid 2 s before its
    first epoch (a restart: the data's loading, a segment's ranks joining), which every run pays again. A trial to
    start costs its 2 epochs and the restart, 4 s; so does a queued run. The old model took both start-ups out as
    a worker's one-off: 2 s each."""
    costs = TrialCosts()
    first = run_on("A", 0, [106.0, 107.0], 100.0, 2)
    costs.ended(first, Outcome(TrialStatus.OK, started=100.0, finished=107.0))
    second = run_on("A", 1, [113.0, 114.0], 110.0, 2)
    costs.ended(second, Outcome(TrialStatus.OK, started=110.0, finished=114.0))
    assert sorted(cost for cost, _w in costs.seen()) == [pytest.approx(2.0), pytest.approx(4.0)]
    queued = run_on("", 2, [], None, 2)
    eta = costs.eta([queued], 0, 1, 120.0)
    assert eta is not None and eta.left.mean == pytest.approx(4.0, rel=0.05)


def test_the_runs_begun_together_on_a_fresh_worker_of_several_slots_all_paid_its_imports() -> None:
    """Worker A has 2 slots: two first runs began together and each paid 5 s of imports (examples/digits-elastic.toml
    on 2 workers of 2 slots under load: 10 s each). The second to end is no restart: a run begun on A after the
    first ended there pays none of it."""
    costs = TrialCosts()
    for number in (0, 1):
        costs.ended(
            run_on("A", number, [106.0, 107.0], 100.0, 2), Outcome(TrialStatus.OK, started=100.0, finished=107.0)
        )
    assert len(costs.restarts) == 0
    assert [cost for cost, _w in costs.seen()] == [pytest.approx(2.0), pytest.approx(2.0)]
    eta = costs.eta([run_on("", 2, [], None, 2)], 0, 1, 120.0)
    assert eta is not None and eta.left.mean == pytest.approx(2.0, rel=0.05)
