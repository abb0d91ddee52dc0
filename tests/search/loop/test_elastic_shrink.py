"""[elastic] shrink = true on the simulated cluster (the real Campaign loop in virtual time; what a trial does is
the model's): a trial grown to 2 slots gives one back at its next rung while new trials wait for a slot."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest

from cluster.executor_api import Started
from cluster.simulated import SimulatedExecutor, TrialPlan
from search.loop.campaign import Campaign
from search.loop.dispatch import Room
from search.loop.trials import Prepared
from search.session.runner import load_study
from search.spec.campaign_spec import parse_spec
from search.store.folder import CampaignFolder
from search.store.records import Attr
from tests.search.toy_specs import toy_toml
from trainers.api import TrialConfig


def shrink_toml(n_trials: int, shrink: bool, ahead: int) -> str:
    """``n_trials`` trivial trials of 4 epochs, ASHA at rungs 1 and 2, widths [1, 2] (reserve 0); ``ahead``:
    ``[study] dispatch_ahead`` (-1: auto)."""
    return toy_toml(
        "shrink",
        n_trials,
        4,
        seed=2,
        pruner="asha",
        dispatch_ahead=ahead if ahead >= 0 else None,
        trainer={"entry": "bench.trivial:fit"},
        space={"x": {"type": "float", "low": 0.0, "high": 1.0}},
        cluster={"n_workers": None},
        top={
            "pruner": {"min_resource": 1, "reduction_factor": 2},
            "elastic": {"widths": [1, 2], "reserve": 0, **({"shrink": True} if shrink else {})},
        },
    )


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
    text = shrink_toml(n_trials, shrink, ahead)
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


def test_a_task_queued_behind_a_grown_trial_waits_for_its_slots_whichever_news_comes_first(tmp_path: Path) -> None:
    """``Dispatcher.room`` at a grown trial's boundary (1 worker x 2 slots): trial 1's 2-slot task was sent while
    trial 0 held both slots. When trial 0's run ends the worker starts trial 1 in its slots, and the controller may
    hear of that start before or after it hears of trial 0's end: either way trial 1 waited for those slots, and
    the room for trial 0's next segment is the same (it was not, when the room counted started tasks as holding
    slots: the shrink decision then depended on which news came first)."""
    text = shrink_toml(2, shrink=True, ahead=-1)
    spec = parse_spec(tomllib.loads(text), "shrink.toml", text)
    folder = CampaignFolder(tmp_path / "room")
    folder.create(text)
    study = load_study(spec, folder, create=True)
    executor = SimulatedExecutor(1, Checkpointed(), slots_per_worker=2, seed=1, controller_time_scale=0)
    campaign = Campaign(spec, folder, study, executor, clock=executor.clock)
    dispatch, plan = campaign.dispatch, campaign.dispatch.plan(0.0)
    try:
        for number in (0, 1):
            config = TrialConfig("shrink", number, {"x": 0.5}, seed=1, epochs=4, data_parallel=2)
            dispatch.launch([Prepared(study.ask(), config, 2)], plan)
            if number == 0:
                dispatch.started(Started(0, 0.0, "sim-worker-0"))  # trial 1 is sent while trial 0 holds both slots
        dispatch.ended(0)  # trial 0's run ended at its rung: its task gave its 2 slots back
        end_heard_first = dispatch.room(2, campaign.supply, False, leaving=2)
        dispatch.started(Started(1, 1.0, "sim-worker-0"))  # the worker started trial 1 in them
        start_heard_first = dispatch.room(2, campaign.supply, False, leaving=2)
        assert end_heard_first == start_heard_first == Room(fits=True, free=2, waiting=2)
        assert dispatch.room(1, campaign.supply, False) == Room(fits=True, free=0, waiting=0)  # a look at idle slots
    finally:
        executor.close()
        campaign.sinks.close()
