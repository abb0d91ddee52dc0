"""A trial holding a GPU lease runs in a process of its own that sees only its lease (``CUDA_VISIBLE_DEVICES``),
as Ray gives each actor its GPUs. Fake GPUs: a worker declaring ``GPU=2`` on a machine without CUDA."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from distributed import Client

from bench.fake_gpus import fake_gpu_cluster
from cluster.executor import DaskExecutor, Finished, GpuPacking, Report, Started, TrialRequest
from trainers.api import TrialConfig

pytestmark = pytest.mark.slow

HELPERS = Path(__file__).resolve().parents[1] / "search"  # gpu_trainers.py


@pytest.fixture
def fake_gpu_client(monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    """One worker process with ``GPU=2`` (fake: no CUDA here) and 4 threads, so 2 trials per fake GPU."""
    monkeypatch.syspath_prepend(str(HELPERS))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with fake_gpu_cluster(1, 2, 4, pythonpath=str(HELPERS)) as cluster, Client(cluster) as client:
        yield client


def _config(number: int, log_dir: Path, steps: int) -> TrialConfig:
    return TrialConfig(
        "fake-gpu", number, {}, seed=number, epochs=1, options={"steps": steps}, log_dir=str(log_dir / str(number))
    )


@pytest.mark.timeout(240)
def test_packed_trials_on_a_fake_gpu_each_see_their_own_lease_in_their_own_process(
    tmp_path: Path, fake_gpu_client: Client
) -> None:
    executor = DaskExecutor(fake_gpu_client, "fake-gpu-procs", packing=GpuPacking(gpus=0.5))
    for number in range(4):  # 4 trials, 2 per fake GPU, all at once
        executor.submit(TrialRequest(number, "gpu_trainers:visible_fit", _config(number, tmp_path, 30)))
    finished: dict[int, Finished] = {}
    reports: dict[int, int] = {}
    started: set[int] = set()
    stopped_at = 0.0
    deadline = time.monotonic() + 180
    while len(finished) < 4 and time.monotonic() < deadline:
        for event in executor.events(0.5):
            if isinstance(event, Started):
                started.add(event.number)
            elif isinstance(event, Report):
                reports[event.number] = reports.get(event.number, 0) + 1
                if event.number == 0 and event.step == 2 and not stopped_at:
                    executor.stop(0)  # a pruning decision: it must reach the trial's own process
                    stopped_at = time.monotonic()
            elif isinstance(event, Finished):
                finished[event.number] = event
    executor.close()
    assert len(finished) == 4, finished
    outcomes = {n: f.outcome for n, f in finished.items()}
    assert all(o.ok for o in outcomes.values()), {n: o.error for n, o in outcomes.items()}
    worker_pid = {o.pid for o in outcomes.values()}
    assert len(worker_pid) == 1  # one worker process ...
    pids = {o.metrics["pid"] for o in outcomes.values()}
    assert len(pids) == 4 and not pids & {float(p) for p in worker_pid if p}  # ... and each trial in its own
    for o in outcomes.values():
        (lease,) = o.devices
        assert o.metrics["visible"] == lease and o.metrics["inside"] == 0.0, o.metrics  # cuda:0 is its lease
        assert o.share == 0.5 and o.peak_memory > 0 and o.memory_kind == "rss"
        assert o.metrics["torch_imported"] == 0.0  # a trainer without torch does not pay its import in its process
    parents = {o.metrics["parent"] for o in outcomes.values()}
    assert len(parents) == 1 and not parents & {float(p) for p in worker_pid}  # all from the worker's warm pool
    assert sorted(o.devices[0] for o in outcomes.values()) == [0, 0, 1, 1]  # two trials on each fake GPU
    stopped = outcomes[0]
    assert stopped.stopped and stopped.metrics["steps"] < 30 and len(stopped.history) < 30
    assert all(outcomes[n].metrics["steps"] == 30 and len(outcomes[n].history) == 30 for n in (1, 2, 3))
    log = (tmp_path / "0" / "stdout.log").read_text()  # the process's prints reach the trial's log
    assert f"trial 0 sees CUDA_VISIBLE_DEVICES={int(stopped.devices[0])}" in log
    assert os.environ.get("CUDA_VISIBLE_DEVICES") is None  # the controller's own environment is untouched


@pytest.mark.timeout(240)
def test_an_error_in_a_trials_own_process_comes_back_with_its_type_and_traceback(
    tmp_path: Path, fake_gpu_client: Client
) -> None:
    executor = DaskExecutor(fake_gpu_client, "fake-gpu-fails", packing=GpuPacking(gpus=0.5))
    config = TrialConfig("fake-gpu", 0, {}, seed=0, epochs=1, options={"steps": 1, "fail": "boom"})
    executor.submit(TrialRequest(0, "gpu_trainers:visible_fit", config))
    deadline = time.monotonic() + 120
    finished: list[Finished] = []
    while not finished and time.monotonic() < deadline:
        finished = [e for e in executor.events(0.5) if isinstance(e, Finished)]
    executor.close()
    (outcome,) = [f.outcome for f in finished]
    assert not outcome.ok and outcome.error == "ValueError: boom" and outcome.error_type == "ValueError"
    assert "visible_fit" in outcome.traceback and not outcome.oom


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.timeout(240)
@pytest.mark.parametrize("processes", [True, False], ids=["worker-process", "in-process-worker"])
def test_the_warm_pool_ends_with_its_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, processes: bool) -> None:
    monkeypatch.syspath_prepend(str(HELPERS))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with (
        fake_gpu_cluster(1, 1, 2, pythonpath=str(HELPERS), processes=processes) as cluster,
        Client(cluster) as client,
    ):
        executor = DaskExecutor(client, "fake-gpu-pool-ends", packing=GpuPacking(gpus=0.5))
        for number in range(2):
            executor.submit(TrialRequest(number, "gpu_trainers:visible_fit", _config(number, tmp_path, 2)))
        finished: list[Finished] = []
        deadline = time.monotonic() + 180
        while len(finished) < 2 and time.monotonic() < deadline:
            finished += [e for e in executor.events(0.5) if isinstance(e, Finished)]
        executor.close()
        assert len(finished) == 2 and all(f.outcome.ok for f in finished), [f.outcome.error for f in finished]
        (server,) = {int(f.outcome.metrics["parent"]) for f in finished}  # one warm server gave both processes
        assert server not in {os.getpid(), *(f.outcome.pid for f in finished)} and _running(server)  # not the worker
    deadline = time.monotonic() + 30
    while _running(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(server)  # shut down with the worker, not left behind by the campaign
