"""A trial's life as segments: a TEST policy resizes each trial from 1 to 2 slots at a rung, on the CPU twin.

Real Dask LocalCluster (1 worker, 2 slots), the project's trainer, real torch DDP over gloo for the second
segment. The trial goes on from its own checkpoint (its steps and examples continue), its second segment's
learning rate follows the linear rule for the doubled global batch, and the study records both segments.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from collections.abc import Mapping
from pathlib import Path

import optuna
import pytest

from cluster.executor import Outcome
from cluster.simulated import SimulatedExecutor, TrialPlan
from search.loop.campaign import Campaign
from search.loop.hooks import CampaignHooks
from search.loop.policies import Decision, NextSegment
from search.loop.segments import Segment, Stop, following, lr_for_batch, segment_config
from search.loop.trials import TrialView
from search.session.runner import RunOptions, load_study, run_campaign
from search.spec.campaign_spec import parse_spec
from search.store.folder import CampaignFolder
from search.store.records import Attr, TrialRecord
from search.vocab.terms import Transition
from tests.campaign_storage import load
from tests.search.toy_specs import digits_toml
from trainers.api import TrialConfig

SPEC = digits_toml("resize", 2)


class ResizeAtRung:
    """TEST policy: a trial's first segment ends at epoch ``rung``; there it goes on at ``width`` slots, its global
    batch grown with the width (each replica's share kept) and its learning rate after the linear rule."""

    def __init__(self, rung: int, width: int) -> None:
        self.rung, self.width = rung, width

    def first_segment(self, config: TrialConfig) -> TrialConfig:
        if config.epochs <= self.rung:
            return config
        return dataclasses.replace(config, epochs=self.rung, schedule_epochs=config.schedule_epochs or config.epochs)

    def on_report(self, running: TrialView, metrics: Mapping[str, float]) -> Stop | None:
        return None

    def on_finished(self, running: TrialView, outcome: Outcome) -> Decision:
        config = running.config
        if not outcome.ok or running.stop_reason or running.width >= self.width or config.epochs != self.rung:
            return None
        batch = int(config.params["batch_size"])
        grown = batch * self.width // running.width
        lr = lr_for_batch(float(config.params["lr"]), batch, grown, "linear")
        resized = segment_config(config, self.width, {"batch_size": grown, "lr": lr}, config.schedule_epochs or 1)
        return NextSegment(
            resized, following(running.segment(), Transition.RESIZE, config, resized, running.examples())
        )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_policy_resizes_a_trial_from_1_to_2_slots_at_a_rung_and_it_goes_on_from_its_checkpoint(
    tmp_path: Path,
) -> None:
    spec = parse_spec(tomllib.loads(SPEC), "resize.toml", SPEC)
    hooks = CampaignHooks(policies=[ResizeAtRung(rung=1, width=2)])
    folder = run_campaign(spec, RunOptions(runs_dir=tmp_path, progress=False, hooks=hooks))
    trials = load(folder.root, "resize").get_trials()
    why = {t.number: {k: v for k, v in t.user_attrs.items() if "error" in k or "fail" in k} for t in trials}
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 2, (why, folder.log.read_text()[-3000:])
    for trial in trials:
        lr = trial.params["lr"]
        segments = [Segment.from_record(r) for r in trial.user_attrs[Attr.SEGMENTS]]
        history = {step: metrics for step, metrics in trial.user_attrs[Attr.HISTORY]}
        assert sorted(history) == [1, 2, 3]  # each epoch once: nothing trained twice, none skipped
        n = int(history[1]["examples"])
        first, second = segments
        assert (first.transition, first.width, first.start_epoch, first.end_epoch) == (Transition.START, 1, 0, 1)
        assert (second.transition, second.width, second.start_epoch, second.end_epoch) == (Transition.RESIZE, 2, 1, 3)
        assert second.examples == n and second.overrides == {"batch_size": 64, "lr": pytest.approx(2 * lr)}
        # examples seen continue across the resize; the steps too, from the checkpoint (a restart would have
        # trained epoch 1 again at the new batch: 2 * ceil(n / 64) steps by epoch 2)
        assert [history[e]["examples"] for e in (1, 2, 3)] == [n, 2 * n, 3 * n]
        assert history[1]["steps"] == math.ceil(n / 32)
        assert history[2]["steps"] == math.ceil(n / 32) + math.ceil(n / 64)
        assert history[1]["lr"] == pytest.approx(lr) and history[3]["lr"] == pytest.approx(2 * lr)
        assert [Segment.from_record(r) for r in TrialRecord.of(trial).segments] == segments  # read back typed
        config = trial.user_attrs[Attr.CONFIG]  # the last segment's: 2 processes, its own params kept as base
        assert config["data_parallel"] == 2 and config["epochs"] == 3
        assert config["base_params"]["lr"] == lr and config["params"]["batch_size"] == 64


def test_a_segment_record_reads_back_and_its_transition_is_typed() -> None:
    segment = Segment(1, Transition.RESIZE, 2, 1, 3, 1437, {"lr": 0.02})
    assert Segment.from_record(segment.to_record()) == segment
    assert segment.to_record()["transition"] == "resize"
    assert Transition.PRUNE.ends and Transition.TARGET_REACHED.ends and not Transition.RESIZE.ends
    with pytest.raises(ValueError, match="width=0: must be >= 1"):
        Segment(0, Transition.START, 0, 0, 1)
    with pytest.raises(ValueError, match="a stop needs a reason"):
        Stop("")


class GrowAtReport:
    """TEST policy: at its first report a 1-slot trial's segment is stopped to grow (``resize``, not a prune); once
    that segment has ended, its next one runs at 2 slots."""

    def on_report(self, running: TrialView, metrics: Mapping[str, float]) -> Stop | None:
        return Stop("grow to 2 slots", Transition.RESIZE) if running.width == 1 else None

    def on_finished(self, running: TrialView, outcome: Outcome) -> Decision:
        if running.stop_transition is not Transition.RESIZE or not running.stop_reason:
            return None
        grown = dataclasses.replace(running.config, data_parallel=2)
        return NextSegment(grown, following(running.segment(), Transition.RESIZE, running.config, grown, None))


class TwoEpochs:
    def plan(self, config, rng):  # type: ignore[no-untyped-def]
        return TrialPlan((1.0, 1.0), ({"score": 0.1, "epoch": 1.0}, {"score": 0.2, "epoch": 2.0}))


SIMULATED = """
[study]
name = "grow"
direction = "maximize"
metric = "score"
sampler = "random"
seed = 2
n_trials = 3

[trainer]
entry = "bench.trivial:fit"
epochs = 2

[space]
x = { type = "float", low = 0.0, high = 1.0 }
"""


def test_a_stop_whose_transition_is_a_resize_is_no_prune_and_the_trial_goes_on_wider(tmp_path: Path) -> None:
    """The stop's transition, not its reason, decides: a resize stop is not told PRUNED, nor recorded as a durable
    prune decision; the loop starts the trial's next segment at 2 slots and tells it COMPLETE at its end."""
    spec = parse_spec(tomllib.loads(SIMULATED), "grow.toml", SIMULATED)
    folder = CampaignFolder(tmp_path / "grow")
    folder.create(SIMULATED)
    study = load_study(spec, folder, create=True)
    executor = SimulatedExecutor(2, TwoEpochs(), slots_per_worker=2, seed=1, controller_time_scale=0)
    hooks = CampaignHooks(policies=[GrowAtReport()])
    Campaign(spec, folder, study, executor, clock=executor.clock, hooks=hooks).run()
    trials = study.get_trials()
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 3
    for trial in trials:
        assert Attr.STOP_DECIDED not in trial.user_attrs and Attr.STOP_REASON not in trial.user_attrs
        widths = [(r["transition"], r["width"]) for r in trial.user_attrs[Attr.SEGMENTS]]
        assert widths == [("start", 1), ("resize", 2)]
        assert trial.user_attrs[Attr.CONFIG]["data_parallel"] == 2
    assert executor.counts["submitted"] == 6
