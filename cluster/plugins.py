"""The Dask plugins: on the embedded cluster no HTTP servers unless a dashboard is asked for, no SIGINT in workers,
no interpreter teardown at a closed worker's exit; on any cluster the executor joins, a trial task's first-run question asked while it queues.

Apart from :mod:`cluster.backends` because defining them imports ``distributed``, which a light command
(``hypersweep check``, ``status``) never needs.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin, WorkerPlugin

__all__ = ["AskFirstRun", "CloseSchedulerHTTP", "CloseWorkerHTTP", "ExitWhenClosed", "IgnoreInterrupt", "SlotInboxes"]

_CLOSED = threading.Event()  # this worker process's worker closed in order (ExitWhenClosed.teardown)


def _close_http_server(server: Any) -> None:
    http = getattr(server, "http_server", None)
    if http is not None:
        http.stop()  # stops listening; Dask's own close stops it again, which does nothing
        server.services.pop("dashboard", None)


class CloseSchedulerHTTP(SchedulerPlugin):
    """Closes the scheduler's HTTP server when the scheduler starts (no dashboard asked for)."""

    name = "hypersweep-no-http"

    async def start(self, scheduler: Any) -> None:
        _close_http_server(scheduler)


class IgnoreInterrupt(WorkerPlugin):
    """A worker process started here ignores SIGINT (and so do the processes it starts, data-parallel ranks).

    A terminal's Ctrl-C goes to the whole foreground process group: the controller stops the campaign and
    closes the cluster in order, and its workers, left alone, print nothing (not ~50 lines of their own
    ``KeyboardInterrupt`` tracebacks and the scheduler's 'workers died'), nor, as it exits, Dask's
    "Exception ignored in Client.__del__"."""

    name = "hypersweep-ignore-sigint"
    idempotent = True

    def setup(self, worker: Any) -> None:
        from .quiet_workers import quiet_dask_finalizers

        quiet_dask_finalizers()  # its clients (a trial's stop Event) collected after its loop closed: no noise
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            # Spawned with SIGINT blocked (cluster.quiet_workers): a Ctrl-C pending since is dropped once ignored.
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


class ExitWhenClosed(WorkerPlugin):
    """A worker process of the embedded cluster whose worker closed in order exits at once, without the interpreter's
    teardown: with torch loaded, freeing every module's objects took ~0.75 s of CPU per process, and on a loaded
    machine the nanny killed the process after waiting its 4 s for it (every campaign's end waited so). Exit handlers
    registered after this plugin's set-up (a warm pool's) still run before; logging and the standard streams are
    flushed; objects left for the teardown are not finalized, as when the nanny killed the process."""

    name = "hypersweep-exit-when-closed"
    idempotent = True

    def setup(self, worker: Any) -> None:
        if getattr(worker, "nanny", None) and not _CLOSED.is_set():  # a process of its own, started by a nanny
            atexit.register(_exit_if_closed)

    def teardown(self, worker: Any) -> None:
        _CLOSED.set()


def _exit_if_closed() -> None:
    if not _CLOSED.is_set():  # the process ends another way (an error before its worker closed): as Python would
        return
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or its reader gone
            pass
    os._exit(0)


class CloseWorkerHTTP(WorkerPlugin):
    """Closes a worker's HTTP server when it starts, before it registers (restarted workers too)."""

    name = "hypersweep-no-http"
    idempotent = True

    def setup(self, worker: Any) -> None:
        _close_http_server(worker)


class AskFirstRun(WorkerPlugin):
    """Asks whether a trial's task ran before as soon as it queues at the worker (:mod:`cluster.first_run`), so
    the answer is there when a slot frees; registered by :class:`cluster.DaskExecutor` on any cluster."""

    name = "hypersweep-first-run"
    idempotent = True

    def setup(self, worker: Any) -> None:
        self._worker = worker

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        from .first_run import ask_early, forget_early

        if not isinstance(key, str):
            return
        if finish in ("ready", "constrained"):
            ask_early(self._worker, key)
        elif finish in ("released", "forgotten", "cancelled"):
            forget_early(key)


class SlotInboxes(WorkerPlugin):
    """Lets the executor put trials straight into a slot runner's inbox on this worker (:mod:`cluster.slot_runner`):
    adds the worker's :data:`~cluster.slot_runner.PUT_OP` handler; registered by :class:`cluster.DaskExecutor`, which
    runs every trial as a task of its own where a cluster refuses it."""

    name = "hypersweep-slot-inboxes"
    idempotent = True

    def setup(self, worker: Any) -> None:
        from .slot_runner import PUT_OP, put_trials

        def hypersweep_slot_put(runner: str, items: list[Any] | None = None, retire: str = "") -> str:
            return put_trials(worker, runner, items, retire)

        worker.handlers[PUT_OP] = hypersweep_slot_put
