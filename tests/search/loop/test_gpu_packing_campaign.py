"""``gpus = 0.25`` on fake ``GPU=2`` workers (the CPU twin of 4 trials per GPU): the scheduler's fractional
counters decide whether a trial starts, the worker's pool which device it gets."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest

from bench.fake_gpus import fake_gpu_cluster
from search.session.runner import RunOptions, run_campaign
from search.spec.campaign_spec import parse_spec
from search.store.records import TrialRecord
from tests.campaign_storage import load

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parents[1]  # tests/search: the helper trainers

SPEC = """
[study]
name = "packed"
direction = "maximize"
metric = "score"
sampler = "random"
seed = 5
n_trials = 24
parallelism = 16

[trainer]
entry = "gpu_trainers:packed_fit"
gpus = 0.25
options = {{ hold = {hold} }}

[space]
x = {{ type = "float", low = 0.0, high = 1.0 }}
"""


@pytest.fixture
def fake_gpu_workers(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Two worker processes declaring ``GPU=2`` each, 8 threads (4 trials per GPU), no CUDA."""
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with fake_gpu_cluster(2, 2, 8, pythonpath=str(HERE)) as cluster:
        yield cluster.scheduler_address


def concurrency(records: list[TrialRecord], key) -> dict[object, int]:  # type: ignore[no-untyped-def]
    """The most trials that held each ``key(record)`` at one moment."""
    most: dict[object, int] = {}
    for r in records:
        at_once = sum(1 for o in records if key(o) == key(r) and o.started <= r.started < o.finished)
        most[key(r)] = max(most.get(key(r), 0), at_once)
    return most


@pytest.mark.timeout(300)
def test_four_trials_share_each_fake_gpu_and_never_five(tmp_path: Path, fake_gpu_workers: str) -> None:
    text = SPEC.format(hold=3.0)
    spec = parse_spec(tomllib.loads(text), str(tmp_path / "packed.toml"), text)
    folder = run_campaign(spec, RunOptions(runs_dir=tmp_path, scheduler=fake_gpu_workers, progress=False))
    records = [TrialRecord.of(t) for t in load(folder.root, "packed").get_trials()]
    assert all(r.state == optuna.trial.TrialState.COMPLETE for r in records), [r.reason for r in records]
    assert all(len(r.devices) == 1 and r.gpu_share == 0.25 for r in records)
    assert all(r.metrics and r.metrics["device"] == r.devices[0] for r in records)  # the lease the trainer saw
    assert len({r.metrics["pid"] for r in records}) == len(records)  # each trial in a process of its own
    per_device = concurrency(records, lambda r: (r.worker, r.devices[0]))
    per_worker = concurrency(records, lambda r: r.worker)
    assert len(per_device) == 4 and max(per_device.values()) <= 4, per_device
    assert max(per_device.values()) >= 2, per_device  # packed, not one trial per GPU
    assert max(per_worker.values()) <= 8, per_worker
    assert all(r.peak_memory and r.memory_kind == "rss" for r in records)  # no CUDA: the host's RSS stands in
    summary = (folder.root / "summary.csv").read_text().splitlines()[0]
    assert "peak_memory_mib" in summary and "gpu_share" in summary
