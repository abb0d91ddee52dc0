"""The embedded cluster's own look at its workers: one that is gone and that its nanny does not start again is
started anew, with a nanny of its own.

Dask's nanny restarts a worker process that dies, but not always: under load it was seen giving up (its restart
cancelled) or waiting for ever on a worker process that never finished starting, and the campaign was left with
no worker. Every ``every`` seconds :class:`Reviver` looks, on the cluster's event loop, for a worker of the
``LocalCluster`` that the scheduler has not had for ``after`` seconds; it closes that nanny (its worker process
killed) and lets the cluster start the worker again from its spec (same name, resources and plugins). When the
block ends, a worker process that never joined is killed, so that the cluster's close does not wait on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from . import way_out

if TYPE_CHECKING:
    from distributed import LocalCluster

__all__ = ["Reviver", "reviving", "REVIVE_AFTER", "LOOK_EVERY"]

log = logging.getLogger(__name__)

REVIVE_AFTER = 20.0  # seconds a worker may be gone before its nanny is replaced (a nanny's restart takes a few)
LOOK_EVERY = 2.0  # seconds between two looks
CLOSE_TIMEOUT = 10.0  # seconds to close a nanny that is being replaced (then its worker process is killed)


class Reviver:
    """Starts again the workers of ``cluster`` that have been gone ``after`` seconds (see the module docstring)."""

    def __init__(self, cluster: LocalCluster, after: float = REVIVE_AFTER) -> None:
        if after <= 0:
            raise ValueError(f"after={after!r}: must be > 0")
        self._cluster, self._after = cluster, after
        self._gone_since: dict[Any, float] = {}  # worker name -> when a look first missed it
        self.revived = 0

    def run(self, stop: threading.Event, every: float) -> None:
        """Look every ``every`` seconds until ``stop`` is set (on a thread of its own)."""
        while not stop.wait(every):
            try:
                self._cluster.sync(self.look)
            except Exception as exc:  # noqa: BLE001 - a look that fails (the cluster closing) is tried again
                log.debug("looking at the embedded workers failed: %s", exc)

    async def kill_stuck(self) -> None:
        """Kill the worker processes that have not joined the scheduler (a start that hangs would hang the cluster's
        close too)."""
        cluster: Any = self._cluster
        here = {ws.nanny for ws in cluster.scheduler.workers.values() if ws.nanny}
        for nanny in list(cluster.workers.values()):
            pid = getattr(getattr(nanny, "process", None), "pid", None)
            if pid and getattr(nanny, "address", None) not in here:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    async def look(self) -> None:
        """One look (on the cluster's event loop): start again the workers gone too long. A worker of the cluster's
        spec is there when its nanny is and the scheduler has its worker; Dask drops a nanny that failed to start
        its worker from the cluster's workers, which its spec still names."""
        cluster: Any = self._cluster
        here = {ws.nanny for ws in cluster.scheduler.workers.values() if ws.nanny}
        now = time.monotonic()
        stale = []
        for name in list(cluster.worker_spec):
            nanny = cluster.workers.get(name)
            if nanny is not None and getattr(nanny, "address", None) in here:
                self._gone_since.pop(name, None)
                continue
            since = self._gone_since.setdefault(name, now)
            if now - since >= self._after:
                stale.append((name, nanny, now - since))
        for name, nanny, gone in stale:
            log.warning(
                "embedded worker %s gone for %.0f s and not restarted by its nanny: starting it again", name, gone
            )
            self._gone_since.pop(name, None)
            if nanny is not None:
                cluster.workers.pop(name, None)
                await _close(nanny)
            self.revived += 1
        if stale:
            await cluster._correct_state()  # SpecCluster: starts the workers of its spec that it does not have


async def _close(nanny: Any) -> None:
    """Kill ``nanny``'s worker process if it is still there (stopped, or hung while starting), then close the nanny,
    bounded (a nanny whose close hangs is left behind)."""
    pid = getattr(getattr(nanny, "process", None), "pid", None)
    if pid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    try:
        await asyncio.wait_for(nanny.close(timeout=CLOSE_TIMEOUT / 2, reason="hypersweep-revive"), CLOSE_TIMEOUT)
    except Exception as exc:  # noqa: BLE001 - a nanny that cannot close is left behind
        log.debug("closing the nanny of a gone worker failed: %s", exc)


@contextlib.contextmanager
def reviving(cluster: LocalCluster, after: float = REVIVE_AFTER, every: float = LOOK_EVERY) -> Iterator[Reviver]:
    """A :class:`Reviver` looking at ``cluster`` every ``every`` seconds while the block runs."""
    reviver = Reviver(cluster, after)
    stop = threading.Event()
    thread = threading.Thread(target=reviver.run, args=(stop, every), name="hypersweep-revive-workers", daemon=True)
    thread.start()
    try:
        yield reviver
    finally:
        stop.set()
        # a look under way (a daemon thread: one that does not end holds nothing) may be closing a nanny
        way_out.joined(thread, every + 2 * CLOSE_TIMEOUT, "the look at the embedded workers did not end")
        way_out.on_loop(
            cluster.loop,
            reviver.kill_stuck,
            CLOSE_TIMEOUT,
            "the embedded cluster's event loop did not run the kill of its workers that never started",
        )
