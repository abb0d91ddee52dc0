"""A real Dask cluster of separate processes (`dask scheduler`, `dask worker`) for tests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

DASK = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
WORKER = [sys.executable, "-m", "distributed.cli.dask_worker"]


@dataclass
class ExternalCluster:
    address: str
    scheduler: subprocess.Popen
    workers: dict[str, subprocess.Popen] = field(default_factory=dict)

    def kill_worker(self, name: str) -> None:
        proc = self.workers.pop(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)

    def worker_names(self) -> dict[str, str]:
        """Worker address -> name, asked from the scheduler."""
        from distributed import Client

        with Client(self.address, timeout=10) as client:
            return {addr: str(w["name"]) for addr, w in client.scheduler_info()["workers"].items()}


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _env(extra: dict[str, str]) -> dict[str, str]:
    return {**os.environ, "DASK_LOGGING__DISTRIBUTED": "error", **extra}


@contextlib.contextmanager
def external_cluster(
    tmp: Path, n_workers: int = 2, scheduler_env: dict[str, str] | None = None, resources: str | None = "CPU=1"
) -> Iterator[ExternalCluster]:
    """Start a scheduler and ``n_workers`` workers (1 thread, ``resources`` each, no nanny) on 127.0.0.1."""
    tmp.mkdir(parents=True, exist_ok=True)
    file = tmp / "scheduler.json"
    procs: list[subprocess.Popen] = []
    try:
        scheduler = subprocess.Popen(
            [*DASK, "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file", str(file)],
            env=_env(scheduler_env or {}),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs.append(scheduler)
        wait_for(file.exists, 60, "the scheduler file")
        wait_for(lambda: "address" in file.read_text(), 30, "the scheduler address")
        address = json.loads(file.read_text())["address"]
        cluster = ExternalCluster(address, scheduler)
        for i in range(n_workers):
            worker = subprocess.Popen(
                [
                    *WORKER,
                    address,
                    "--nthreads",
                    "1",
                    *(["--resources", resources] if resources else []),
                    "--no-nanny",
                    "--no-dashboard",
                    "--name",
                    f"w{i}",
                    "--host",
                    "127.0.0.1",
                ],
                env=_env({"OMP_NUM_THREADS": "1"}),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            procs.append(worker)
            cluster.workers[f"w{i}"] = worker
        wait_for(lambda: len(cluster.worker_names()) == n_workers, 90, f"{n_workers} workers")
        yield cluster
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        for proc in procs:
            proc.wait(timeout=30)
