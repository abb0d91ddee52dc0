"""[elastic] shrink = true on the simulated cluster (the real Campaign loop in virtual time; what a trial does is
the model's): a trial grown to 2 slots gives one back at its next rung while new trials wait for a slot."""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest

from cluster.simulated import SimulatedExecutor, TrialPlan
from search.loop.campaign import Campaign
from search.session.runner import load_study
from search.spec.campaign_spec import parse_spec
from search.store.folder import CampaignFolder
from search.store.records import Attr

SPEC = """
[study]
name = "shrink"
direction = "maximize"
metric = "score"
sampler = "random"
seed = 2
n_trials = 6
pruner = "asha"

[pruner]
min_resource = 1
reduction_factor = 2

[trainer]
entry = "bench.trivial:fit"
epochs = 4

[space]
x = { type = "float", low = 0.0, high = 1.0 }

[elastic]
widths = [1, 2]
reserve = 0
"""


class Checkpointed:
    """Each run goes on from the epoch its trial's last run ended at (its checkpoint) to its config's ``epochs``;
    one second per epoch at any width; the score grows with ``x`` and the epoch."""

    def __init__(self) -> None:
        self.at: dict[int, int] = {}

    def plan(self, config: Mapping[str, Any], rng: np.random.Generator) -> TrialPlan:
        number, end, x = int(config["number"]), int(config["epochs"]), float(config["params"]["x"])
        epochs = range(self.at.get(number, 0) + 1, end + 1)
        self.at[number] = end
        metrics = tuple({"score": x * e, "epoch": float(e), "steps": float(e), "examples": 100.0 * e} for e in epochs)
        return TrialPlan(tuple(1.0 for _ in epochs), metrics)


def widths_of(tmp_path: Path, shrink: bool, ahead: int = -1, n_trials: int = 6) -> list[list[tuple[str, int]]]:
    """Each trial's segments (transition, width); ``ahead``: ``[study] dispatch_ahead`` (-1: auto)."""
    text = SPEC.replace("n_trials = 6", f"n_trials = {n_trials}") + ("shrink = true\n" if shrink else "")
    if ahead >= 0:
        text = text.replace('pruner = "asha"\n', f'pruner = "asha"\ndispatch_ahead = {ahead}\n', 1)
    spec = parse_spec(tomllib.loads(text), "shrink.toml", text)
    folder = CampaignFolder(tmp_path / f"shrink-{shrink}-{ahead}")
    folder.create(text)
    study = load_study(spec, folder, create=True)
    executor = SimulatedExecutor(1, Checkpointed(), slots_per_worker=2, seed=1, controller_time_scale=0)
    Campaign(spec, folder, study, executor, clock=executor.clock).run()
    trials = study.get_trials()
    assert len(trials) == spec.study.n_trials and all(t.state.is_finished() for t in trials)
    assert all(t.state is not optuna.trial.TrialState.FAIL for t in trials)
    return [[(r["transition"], r["width"]) for r in t.user_attrs.get(Attr.SEGMENTS, [])] for t in trials]


@pytest.mark.parametrize("shrink", [True, False])
def test_a_grown_trial_gives_a_slot_back_at_its_next_rung_while_new_trials_wait(tmp_path: Path, shrink: bool) -> None:
    shrunk = [w for w in widths_of(tmp_path, shrink) if ("resize", 2) in w and w[w.index(("resize", 2)) + 1 :]]
    assert shrunk, "no trial grew to 2 slots and went on"
    gave_back = [w for w in shrunk if w[w.index(("resize", 2)) + 1] == ("resize", 1)]
    assert bool(gave_back) is shrink, shrunk  # without shrink = true a grown trial keeps its 2 slots


def test_trials_queued_at_the_workers_wait_too(tmp_path: Path) -> None:
    """With tasks queued at the workers beyond the free slots (dispatch_ahead), the trials waiting there, sent but
    not started, are trials that wait: each grown trial gives a slot back (counted as holding slots, they let
    both grown trials keep their 2 while the third waited)."""
    widths = widths_of(tmp_path, shrink=True, ahead=2, n_trials=3)  # every trial asked and sent early
    grown = [w for w in widths if ("resize", 2) in w and w[w.index(("resize", 2)) + 1 :]]
    assert len(grown) == 2 and all(w[w.index(("resize", 2)) + 1] == ("resize", 1) for w in grown), widths


TWIN = """
[study]
name = "shrink-twin"
direction = "maximize"
metric = "val_accuracy"
sampler = "random"
seed = 3
n_trials = 4
max_retries = 0
pruner = "asha"

[pruner]
min_resource = 1
reduction_factor = 2

[trainer]
entry = "trainers.classifier:fit"
dataset = "digits"
epochs = 3
device = "cpu"

[space]
optimizer = "adam"
lr = { type = "float", low = 1e-3, high = 1e-2, log = true }
batch_size = 32
hidden = 32

[cluster]
n_workers = 1
slots_per_worker = 2

[elastic]
widths = [1, 2]
batch = "grow"
lr_rule = "linear"
reserve = 0
shrink = true
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_on_the_cpu_twin_a_grown_trial_gives_a_slot_back_while_new_trials_wait(tmp_path: Path) -> None:
    """Real Dask (1 worker x 2 slots), real torch DDP over gloo: a trial grown 1 -> 2 at its first rung goes on at
    1 from its checkpoint at its next, while trials wait; examples seen continue, the batch and the learning rate
    go back with the width (the linear rule, from the trial's own rate)."""
    from search.loop.segments import Segment
    from search.session.runner import RunOptions, run_campaign
    from search.vocab.terms import Transition
    from tests.campaign_storage import load

    spec = parse_spec(tomllib.loads(TWIN), "shrink.toml", TWIN)
    folder = run_campaign(spec, RunOptions(runs_dir=tmp_path, progress=False))
    trials = load(folder.root, "shrink-twin").get_trials()
    assert all(t.state is not optuna.trial.TrialState.FAIL for t in trials), [t.user_attrs for t in trials]
    shrunk = [
        t for t in trials
        if [(s["transition"], s["width"]) for s in t.user_attrs.get(Attr.SEGMENTS, [])][1:] == [("resize", 2), ("resize", 1)]
    ]  # fmt: skip
    assert shrunk, {t.number: t.user_attrs.get(Attr.SEGMENTS) for t in trials}
    trial = shrunk[0]
    lr = trial.params["lr"]
    segments = [Segment.from_record(r) for r in trial.user_attrs[Attr.SEGMENTS]]
    assert [(s.transition, s.width, s.start_epoch, s.end_epoch) for s in segments] == [
        (Transition.START, 1, 0, 1), (Transition.RESIZE, 2, 1, 2), (Transition.RESIZE, 1, 2, 3)
    ]  # fmt: skip
    assert segments[1].overrides == {"batch_size": 64, "lr": pytest.approx(2 * lr)}
    assert segments[2].overrides == {"batch_size": 32, "lr": pytest.approx(lr)}  # the rule undone, not compounded
    history = {step: metrics for step, metrics in trial.user_attrs[Attr.HISTORY]}
    n = int(history[1]["examples"])
    assert sorted(history) == [1, 2, 3] and [history[e]["examples"] for e in (1, 2, 3)] == [n, 2 * n, 3 * n]
    assert [segments[i].examples for i in (1, 2)] == [n, 2 * n]  # each segment from where the one before stopped
    assert history[3]["steps"] == 2 * math.ceil(n / 32) + math.ceil(n / 64)  # from the checkpoint, not from scratch
    assert [history[e]["lr"] for e in (1, 2, 3)] == [pytest.approx(lr), pytest.approx(2 * lr), pytest.approx(lr)]
