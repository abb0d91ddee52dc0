"""What a Ctrl-C leaves on the terminal from the embedded cluster's worker processes: nothing.

:func:`spawn_without_sigint`: worker processes spawned here are born with SIGINT blocked, so a terminal's Ctrl-C,
sent to the whole foreground process group, reaches only the controller, even in a worker's first second of Python
start-up (before :class:`cluster.plugins.IgnoreInterrupt` ignores it), where it printed a ``KeyboardInterrupt``
traceback. :func:`quiet_dask_finalizers` (the controller and each worker): no "Exception ignored in
Client.__del__" as a process exits. :func:`silence_logs`: Dask's own log handlers show warnings and errors only.
:func:`end_spawned_children`: after a Ctrl-C, no worker still starting prints a traceback as the command exits.

A thread's signal mask is inherited across ``fork`` and ``exec``; the standard library starts its own resource
tracker the same way. Blocking SIGINT in Dask's thread that spawns moves Ctrl-C to another thread of the controller,
its main thread.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing import connection, util
from typing import TYPE_CHECKING, Any

from . import way_out

if TYPE_CHECKING:
    from .options import ClusterOptions

__all__ = ["end_spawned_children", "quiet_dask_finalizers", "silence_logs", "spawn_without_sigint"]

_SPAWN: Callable[..., int] = util.spawnv_passfds
#: The name of the thread that starts each of Dask's processes (a nanny's worker): distributed.process.AsyncProcess.
DASK_SPAWNER = "AsyncProcess "


def _spawnv_passfds(path: Any, args: Sequence[Any], passfds: Sequence[int]) -> int:
    if not threading.current_thread().name.startswith(DASK_SPAWNER):  # a program's own processes: as they were
        return _SPAWN(path, args, passfds)
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        return _SPAWN(path, args, passfds)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def spawn_without_sigint() -> None:
    """From now on, a process that Dask spawns from this one (a nanny's worker) starts with SIGINT blocked; other
    processes that ``multiprocessing`` spawns here (in a program that calls ``search.run``) are left as they were."""
    if hasattr(signal, "pthread_sigmask"):
        util.spawnv_passfds = _spawnv_passfds


def quiet_dask_finalizers() -> None:
    """Drop the "Exception ignored in Client.__del__ ... IOLoop is closed" that Dask prints when a client it
    already closed (timed out closing, under load) is collected after its loop: other unraisable errors
    still show, through the hook that was there."""
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        owner = getattr(unraisable, "object", None)
        if getattr(owner, "__module__", "").startswith(("distributed.", "tornado.")):
            return
        previous(unraisable)

    sys.unraisablehook = hook


def silence_logs(options: ClusterOptions) -> int | bool:
    """Dask's ``silence_logs`` for a cluster started here: while it runs, Dask's own log handlers (this process's
    and its worker processes') show warnings and errors only, unless ``options.verbose``. False keeps them as they are.
    """
    return False if options.verbose else logging.WARNING


def end_spawned_children(timeout: float | None = None) -> None:
    """End the processes ``multiprocessing`` spawned from this one that are still alive (a worker still starting
    when Ctrl-C came), as the interpreter's exit would, but before that exit unlinks the semaphores they were
    given: the exit runs those finalizers first, and a child still reading its arguments then printed a
    ``FileNotFoundError`` traceback under the command's one line (CI, once). SIGTERM, then SIGKILL after
    ``timeout`` seconds for a child that is still there (5, or what is left of the way out: :mod:`cluster.way_out`)."""
    timeout = way_out.left(5.0) if timeout is None else timeout
    children = multiprocessing.active_children()
    for child in children:
        child.terminate()
    deadline = time.monotonic() + timeout
    alive = {child.sentinel: child for child in children}
    while alive and time.monotonic() < deadline:
        ended = set(connection.wait(list(alive), max(0.0, deadline - time.monotonic())))
        alive = {sentinel: child for sentinel, child in alive.items() if sentinel not in ended}
    for child in alive.values():
        child.kill()
