"""A trial that ran in a process from a worker's warm pool (a fake GPU lease, issue 54) reproduces exactly in a
fresh interpreter: ``hypersweep reproduce`` says MATCH."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.fake_gpus import fake_gpu_cluster
from search.reports.reproduce import reproduce_trial
from search.session.runner import RunOptions, run_campaign
from search.spec.campaign_spec import load_spec
from search.store.records import TrialRecord
from tests.campaign_storage import load
from tests.spec_files import write_spec

pytestmark = pytest.mark.slow

SPEC = """
[study]
name = "pool-repro"
direction = "maximize"
metric = "val_accuracy"
sampler = "random"
seed = 11
n_trials = 2
deterministic = true

[trainer]
entry = "trainers.classifier:fit"
dataset = "digits"
epochs = 2
device = "cpu"
gpus = 0.5

[space]
model = "mlp"
lr = { type = "float", low = 0.01, high = 0.1, log = true }
batch_size = 64
hidden = 32
"""


@pytest.fixture
def fake_gpu_worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """One worker process declaring ``GPU=1`` (fake: no CUDA here), 2 threads."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with fake_gpu_cluster(1, 1, 2) as cluster:
        yield cluster.scheduler_address


@pytest.mark.timeout(300)
def test_a_trial_from_the_warm_pool_reproduces_exactly(tmp_path: Path, fake_gpu_worker: str) -> None:
    spec = load_spec(write_spec(tmp_path / "pool.toml", SPEC))
    folder = run_campaign(spec, RunOptions(runs_dir=tmp_path / "runs", scheduler=fake_gpu_worker, progress=False))
    records = [TrialRecord.of(t) for t in load(folder.root, "pool-repro").get_trials()]
    assert [r.state.name for r in records] == ["COMPLETE", "COMPLETE"], [r.reason for r in records]
    assert all(len(r.devices) == 1 for r in records)  # each held a (fake) GPU lease: its process came from the pool
    result = reproduce_trial(folder.root, 1)
    assert result.exact and result.matched, result.checks
