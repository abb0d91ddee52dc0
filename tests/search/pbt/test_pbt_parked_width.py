"""A parked PBT member holds no slot (:mod:`search.loop.barrier`), so the room for its next segment counts none as
its own: with ``[elastic] shrink = true`` a grown member released after the rest of its rung took the slots was told
that the members just sent were trials waiting for its slots, and gave a slot back to no one (released first, it
kept its width: the rung's order decided). The real Campaign, Barrier and Population on the simulated cluster."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from cluster.outcome import Outcome, TrialStatus
from cluster.simulated import SimulatedExecutor, TrialPlan
from search.loop.campaign import Campaign
from search.loop.segments import Segment
from search.loop.trials import Prepared
from search.session.runner import load_study
from search.spec.campaign_spec import parse_spec
from search.store.folder import CampaignFolder
from search.vocab.terms import Transition
from tests.search.toy_specs import toy_toml
from trainers.api import TrialConfig

SPEC = toy_toml(
    "parked",
    4,
    3,
    seed=2,
    scheduler="pbt",
    pruner="none",
    trainer={"entry": "bench.trivial:fit"},
    space={"x": {"type": "float", "low": 0.0, "high": 1.0}},
    top={
        "pbt": {"interval": 1, "quantile": 0.25, "resample_probability": 0.0, "hyperparams": ["x"]},
        "elastic": {"widths": [1, 2], "grow": "pbt", "shrink": True, "reserve": 0},
    },
)


class OneEpoch:
    """Each run: its segment's one epoch, one second."""

    def plan(self, config: Mapping[str, Any], rng: np.random.Generator) -> TrialPlan:
        epoch = float(config["epochs"])
        return TrialPlan((1.0,), ({"score": float(config["params"]["x"]) * epoch, "epoch": epoch},))


def test_a_grown_member_released_after_its_rung_took_the_slots_keeps_its_width_when_no_trial_waits(
    tmp_path: Path,
) -> None:
    """4 members at rung 2 on 4 slots; member 3 grew to 2 slots at rung 1 (when the cluster had 5: a batch job has
    ended since), the others run at 1. Released in number order, members 0-2 take 3 slots; member 3 goes on at 2,
    queued for the slots the others free: nothing else waits (old: 'trials wait for 1', on at 1)."""
    spec = parse_spec(tomllib.loads(SPEC), "parked.toml", SPEC, check_trainer=False)  # runs are simulated
    folder = CampaignFolder(tmp_path / "parked")
    folder.create(SPEC)
    study = load_study(spec, folder, create=True)
    executor = SimulatedExecutor(1, OneEpoch(), slots_per_worker=4, seed=1, controller_time_scale=0)
    campaign = Campaign(spec, folder, study, executor, clock=executor.clock)
    assert campaign.barrier is not None
    dispatch, plan = campaign.dispatch, campaign.dispatch.plan(0.0)
    try:
        for number in range(4):
            width = 2 if number == 3 else 1
            trial = study.ask(fixed_distributions=spec.space.base_distributions())
            where = folder.trial(number)
            where.mkdir(parents=True, exist_ok=True)
            (where / "checkpoint.pt").write_bytes(b"state")  # what a copy (exploit) takes
            config = TrialConfig(
                "parked", number, dict(trial.params), seed=number, epochs=2, schedule_epochs=3, data_parallel=width,
                checkpoint_dir=str(where), inherit_checkpoint=True,
            )  # fmt: skip
            how = Transition.RESIZE if width == 2 else Transition.CONTINUE
            segments = (Segment(0, Transition.START, 1, 0, 1, 0), Segment(1, how, width, 1, 2, 100))
            dispatch.launch([Prepared(trial, config, width, fresh=True, segments=segments)], plan)
        for number in range(4):  # each ends its segment at rung 2 and parks there, holding no slot
            running = dispatch.ended(number)
            assert running is not None
            metrics = {"score": 0.1 * (number + 1), "epoch": 2.0}
            assert not campaign.barrier.population.arrive(running.config, metrics)
            campaign.barrier.park(running, Outcome(TrialStatus.OK, metrics=metrics))
        assert dispatch.launched() == 0
        campaign._step_population()  # rung 2 decided: every member goes on, in number order
        grown = dispatch.running[3]
        assert [(s.width, s.start_epoch) for s in grown.segments][-1] == (2, 2), grown.segments
        assert grown.width == 2 and dispatch.launched() == 5
    finally:
        executor.close()
        campaign.sinks.close()
