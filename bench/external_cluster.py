"""A Dask cluster that runs on its own, for benchmarks that join it as users join theirs.

    with external_cluster(4, tls=True, folder=tmp) as (address, tls):
        with open_cluster(ClusterOptions(address=address, tls=tls)) as client: ...

The scheduler is ``dask scheduler`` and each worker ``hypersweep worker --slots 1`` (one slot, one thread,
``CPU=1``, with a nanny), every one its own process group started here; over TLS with a throw-away CA and
certificate (:mod:`bench.tls_certs`), else plain TCP on loopback. Nothing is shared with the process that
joins: hypersweep and the peers reach it over the network, as they would a cluster someone else started.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from cluster import TLSFiles

__all__ = ["external_cluster", "KINDS"]

KINDS = ("embedded", "tcp", "tls")  # --cluster: started by hypersweep, or joined over plain TCP or TLS
START_TIMEOUT = 60.0  # seconds for the scheduler and every worker to be up


def _spawn(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in reversed(procs):  # workers first, then the scheduler
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _scheduler_address(file: Path, proc: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"dask scheduler exited ({proc.returncode}): {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError, ValueError, KeyError):
            return str(json.loads(file.read_text())["address"])
        time.sleep(0.1)
    raise RuntimeError(f"dask scheduler did not write {file} within {START_TIMEOUT:g} s")


def _wait_for_workers(file: Path, n: int, tls: TLSFiles | None) -> None:
    from distributed import Client

    security = tls.security() if tls is not None else None
    with Client(scheduler_file=str(file), security=security, timeout=START_TIMEOUT) as client:
        client.wait_for_workers(n, timeout=START_TIMEOUT)


@contextlib.contextmanager
def external_cluster(
    slots: int, tls: bool, folder: Path, env: dict[str, str] | None = None
) -> Iterator[tuple[str, TLSFiles | None]]:
    """Start a scheduler and ``slots`` one-slot workers (``env``: added to their environment); yield the
    scheduler's address and the TLS files to join it with (None over TCP); stop them all on exit."""
    from bench.tls_certs import make_certs

    folder.mkdir(parents=True, exist_ok=True)
    files = TLSFiles(*make_certs(folder / "certs")) if tls else None
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "DASK_LOGGING__DISTRIBUTED": "error",
        **(env or {}),
    }
    file = folder / "scheduler.json"
    args = [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0"]
    args += ["--scheduler-file", str(file), "--no-dashboard"]
    if files is not None:
        args += ["--protocol", "tls", "--tls-ca-file", files.ca_file, "--tls-cert", files.cert_file]
        args += ["--tls-key", files.key_file]
    procs = [_spawn(args, folder / "scheduler.log", env)]
    try:
        with _terminate_as_exit():  # its own sessions: a SIGTERM to the bench must stop them too
            address = _scheduler_address(file, procs[0], folder / "scheduler.log")
            worker = [sys.executable, "-m", "search", "worker", address, "--slots", "1", "--name"]
            tls_args = ["--tls", files.ca_file, files.cert_file, files.key_file] if files is not None else []
            for i in range(slots):
                procs.append(_spawn([*worker, f"bench-{i}", *tls_args], folder / f"worker-{i}.log", env))
            _wait_for_workers(file, slots, files)
            yield address, files
    finally:
        _stop(procs)


@contextlib.contextmanager
def _terminate_as_exit() -> Iterator[None]:
    """While inside, SIGTERM raises ``SystemExit`` (143) in the main thread, so the cluster is stopped on the way out
    (by default SIGTERM ends Python at once, and the processes in their own sessions would be left running)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
