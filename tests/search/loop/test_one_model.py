"""One trial model per campaign: the campaign hands its own (search.loop.costs.TrialCosts) to its executor when it is
built, so that what the campaign learns (runs, reports, running trials, memory peaks) is what the executor's
walltime rule and packing read. A real Dask executor on an in-process scheduler; nothing runs."""

from __future__ import annotations

import tomllib
from pathlib import Path

import optuna
import pytest
from distributed import Client, LocalCluster
from toy_specs import toy_toml

from cluster.executor import DaskExecutor, TrialRequest
from cluster.outcome import Outcome, TrialStatus
from cluster.packing import GpuPacking
from search.loop.campaign import Campaign
from search.loop.trials import RunningTrial
from search.session.runner import load_study
from search.spec.campaign_spec import parse_spec
from search.store.folder import CampaignFolder
from trainers.api import TrialConfig

GiB = 2**30


def _campaign(tmp_path: Path, executor: DaskExecutor) -> Campaign:
    text = toy_toml("one", 2, 1, seed=1, space={"batch_size": {"type": "int", "low": 16, "high": 512, "log": True}})
    spec = parse_spec(tomllib.loads(text), "one.toml", text, check_trainer=False)
    folder = CampaignFolder(tmp_path / "one")
    folder.create(text)
    return Campaign(spec, folder, load_study(spec, folder, create=True), executor)


def _ran(number: int, batch_size: int) -> tuple[RunningTrial, TrialConfig]:
    config = TrialConfig(study="one", number=number, params={"batch_size": batch_size}, seed=number, epochs=1)
    trial = optuna.create_study().ask()
    return RunningTrial(trial, config, 1, 0.0, started_at=100.0), config


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_the_executor_reads_the_campaigns_model_and_a_peak_the_campaign_learns_reaches_the_packing(
    tmp_path: Path,
) -> None:
    with (
        LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        packing = GpuPacking(gpus=0.5, auto_memory=True)
        executor = DaskExecutor(client, "one-model", resource="GPU", packing=packing)
        try:
            campaign = _campaign(tmp_path, executor)
            assert executor.costs() is campaign.costs  # one instance: no model of the executor's own
            running, config = _ran(0, 64)
            request = TrialRequest(1, "tests:nothing", config)
            assert executor._feed.expect([request]) == 0  # noqa: SLF001 - nothing known yet
            peak = Outcome(TrialStatus.OK, started=100.0, finished=130.0, peak_memory=4 * GiB, memory_kind="cuda")
            campaign.costs.ended(running, peak)
            assert executor._feed.expect([request]) == int(4 * GiB * 1.2)  # noqa: SLF001 - the peak, with margin
            rss = Outcome(TrialStatus.OK, started=100.0, finished=130.0, peak_memory=64 * GiB, memory_kind="rss")
            campaign.costs.ended(_ran(2, 64)[0], rss)  # a host figure: not the device's
            assert executor._feed.expect([request]) == int(4 * GiB * 1.2)  # noqa: SLF001
            assert executor.costs().duration({"batch_size": 64}, 1, 1).mean == pytest.approx(30.0)  # its run
        finally:
            executor.close()
