"""Ending a trial that does not answer a stop request: its worker process is killed and its nanny starts a new one.

A Dask task cannot be interrupted in its thread, and a hung trainer (a deadlock, a
collective waiting on a dead peer, an endless loop that never reports) never reaches
its next ``should_stop``. The one sure way out is the process: the nanny of the trial's
worker kills the worker process and every process it started (DDP ranks, data loaders),
with SIGKILL, which works even when the worker's event loop is stuck, and then, as
after any crash, starts a fresh worker in its place.
"""

from __future__ import annotations

import os
import signal
from typing import Any

__all__ = ["kill_worker_tree"]


async def kill_worker_tree(dask_worker: Any) -> int:
    """Run on a nanny (``Client.run(..., nanny=True, wait=False)``, which needs a coroutine function):
    SIGKILL its worker process and all its descendants.

    Returns how many processes were signalled. The nanny sees its worker exit and restarts it.
    """
    import psutil  # a dependency of distributed

    pid = dask_worker.pid
    if not pid:
        return 0
    try:
        worker = psutil.Process(pid)
        tree = [worker, *worker.children(recursive=True)]  # listed before the worker dies and they are orphaned
    except psutil.NoSuchProcess:
        return 0
    killed = 0
    for proc in tree:
        try:
            os.kill(proc.pid, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            continue
    return killed
