"""The benchmarks' cluster started apart (bench.external_cluster): its processes, each in a session of its own, are
stopped when the bench is terminated, not only when it ends normally."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

HOLD = """
import sys, time
from pathlib import Path
from bench.external_cluster import external_cluster
with external_cluster(1, tls=False, folder=Path(sys.argv[1])) as (address, _):
    print(address, flush=True)
    time.sleep(300)
"""


def _started_for(*marks: str) -> list[psutil.Process]:
    """The processes whose command line names one of ``marks`` (the scheduler's file, its address), and theirs."""
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline"]):
        if any(mark in part for part in proc.info["cmdline"] or () for mark in marks):
            with contextlib.suppress(psutil.Error):
                for each in (proc, *proc.children(recursive=True)):
                    found[each.pid] = each
    return list(found.values())


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_terminated_bench_stops_the_cluster_it_started(tmp_path: Path) -> None:
    folder = tmp_path / "cluster"
    root = Path(__file__).resolve().parents[2]
    bench = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    running: list[psutil.Process] = []
    try:
        assert bench.stdout is not None
        address = bench.stdout.readline().strip()
        assert address.startswith("tcp://")  # the scheduler and its worker are up
        running = [p for p in _started_for(str(folder), address) if p.pid != bench.pid]
        assert len(running) >= 3, running  # the scheduler, the worker's nanny and the worker
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(timeout=60) == 128 + signal.SIGTERM
        gone, alive = psutil.wait_procs(running, timeout=30)
        assert not alive, alive
    finally:
        if bench.poll() is None:
            bench.kill()
        for proc in [*running, *_started_for(str(folder))]:
            with contextlib.suppress(psutil.Error):
                proc.kill()
