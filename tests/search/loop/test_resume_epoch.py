"""Where a trial's next run resumes, as the controller sends it (``TrialRequest.start_epoch``): the executor's walltime
rule (:mod:`cluster.walltimes`) predicts only the epochs left from there. A retry after a lost run resumes at the
last epoch it reported that a checkpoint holds, a later segment at its start, a resumed campaign's trial at the
checkpoint its earlier reports (``metrics.jsonl``) show. The real Campaign's dispatcher on the simulated cluster."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from cluster.executor_api import TrialRequest
from cluster.simulated import SimulatedExecutor, TrialPlan
from search.loop.campaign import Campaign
from search.loop.segments import Segment, resume_epoch
from search.loop.trials import Prepared
from search.session.runner import load_study
from search.spec.campaign_spec import parse_spec
from search.store.folder import CampaignFolder
from search.store.records import append_metrics_line
from search.vocab.terms import Transition
from tests.search.loop.test_elastic_shrink import shrink_toml
from trainers.api import TrialConfig


class OneEpoch:
    """Each run: one epoch of one second (what it runs does not matter here)."""

    def plan(self, config: Mapping[str, Any], rng: np.random.Generator) -> TrialPlan:
        return TrialPlan((1.0,), ({"score": 1.0},))


class Recording(SimulatedExecutor):
    """The simulated cluster, keeping each request it is sent."""

    def __init__(self) -> None:
        super().__init__(1, OneEpoch(), slots_per_worker=2, seed=1, controller_time_scale=0)
        self.sent: list[TrialRequest] = []

    def submit(self, request: TrialRequest) -> None:
        self.sent.append(request)
        super().submit(request)


def _config(number: int, folder: Path, every: int = 2) -> TrialConfig:
    where = str(folder / f"trial{number}")
    return TrialConfig("shrink", number, {"x": 0.5}, seed=1, epochs=10, checkpoint_dir=where, checkpoint_every=every)


def test_a_retry_a_later_segment_and_a_resumed_campaigns_trial_are_sent_with_the_epoch_they_resume_at(
    tmp_path: Path,
) -> None:
    text = shrink_toml(3, shrink=False, ahead=-1)
    spec = parse_spec(tomllib.loads(text), "shrink.toml", text)
    folder = CampaignFolder(tmp_path / "resume")
    folder.create(text)
    study = load_study(spec, folder, create=True)
    executor = Recording()
    campaign = Campaign(spec, folder, study, executor, clock=executor.clock)
    dispatch, plan = campaign.dispatch, campaign.dispatch.plan(0.0)
    try:
        dispatch.launch([Prepared(study.ask(), _config(0, tmp_path), 1, fresh=True)], plan)
        running = dispatch.running[0]
        for epoch in (1, 2, 3):  # checkpoints every 2 epochs: the last one at epoch 2
            running.keep_report(epoch, {"epoch": float(epoch)}, float(epoch))
        dispatch.ended(0)
        dispatch.resubmit(running, running.config)  # its worker was lost after epoch 3
        dispatch.ended(0)
        running.next_segment(running.config, Segment(1, Transition.RESIZE, 1, 6, 10))
        dispatch.resubmit(running, running.config)
        earlier = study.ask()  # a trial an earlier controller ran to epoch 7 (checkpoint at 6)
        for epoch in range(1, 8):
            append_metrics_line(folder.trial_metrics_file(earlier.number), epoch, {"epoch": float(epoch)}, 0.0)
        dispatch.launch([Prepared(earlier, _config(earlier.number, tmp_path), 1)], plan)
        assert [(r.number, r.start_epoch) for r in executor.sent] == [(0, 0), (0, 2), (0, 6), (earlier.number, 6)]
    finally:
        executor.close()
        campaign.sinks.close()


def test_the_epoch_a_run_resumes_at_is_a_checkpoints() -> None:
    """Reported epochs count only where a checkpoint holds them; none without a checkpoint folder; at most the
    segment's end."""
    first = Segment(0, Transition.START, 1, 0, 10, 0)
    reports = [(e, {"epoch": float(e)}) for e in (1, 2, 3, 4, 5)]
    config = TrialConfig("s", 0, {}, seed=1, epochs=10, checkpoint_dir="c", checkpoint_every=2)
    assert resume_epoch(first, config, reports) == 4
    assert resume_epoch(first, TrialConfig("s", 0, {}, seed=1, epochs=10), reports) == 0
    assert resume_epoch(Segment(1, Transition.EXPLOIT, 1, 8, 10), config, reports) == 8
    assert resume_epoch(first, TrialConfig("s", 0, {}, seed=1, epochs=3, checkpoint_dir="c"), reports) == 3
    assert resume_epoch(first, config, [(1, {"loss": 1.0})]) == 0  # a trainer that reports no epoch
