"""The controller's way out (Ctrl-C or SIGTERM, a normal end, an error): every wait in it bounded, and the whole.

:func:`begin` starts the way out: from then on each of its waits takes at most what is left of
:data:`WAY_OUT_SECONDS` (:func:`left`), and a wait that runs out says on stderr (and in the log) what it waited for,
then the way out goes on without it (:func:`ran_out`). :func:`begin` with an exit status (the command's Ctrl-C and
SIGTERM) also arms a watchdog: a process still there when the way out's time is up (a wait in a library that no one
bounded, the interpreter's exit joining a thread that waits on a scheduler that does not answer) says so, kills
the processes it started and exits with that status. :func:`on_loop` runs a Dask call on its client's event loop
within a bound; :func:`joined` waits for a thread within one. Nothing here imports ``distributed``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["WAY_OUT_SECONDS", "begin", "close_within", "end", "joined", "last_words", "left", "on_loop", "ran_out"]

log = logging.getLogger(__name__)

#: The whole way out, from Ctrl-C/SIGTERM (or the campaign's end) to the process's exit, in seconds at most.
WAY_OUT_SECONDS = 60.0

_lock = threading.Lock()
_deadline: float | None = None  # when the way out under way must be over (monotonic)
_armed = False  # a watchdog waits for that deadline (the way out ends the process)
_last_words: list[str] = []  # what the watchdog says last (the command that continues the campaign)


def begin(exit_status: int | None = None, seconds: float = WAY_OUT_SECONDS) -> None:
    """The way out starts now, unless it already did (its deadline stays); ``exit_status``: the process ends with
    it at the deadline at the latest (a daemon watchdog thread)."""
    global _deadline, _armed
    with _lock:
        if _deadline is None:
            _deadline = time.monotonic() + seconds
        if exit_status is None or _armed:
            return
        _armed = True
        deadline = _deadline
    watch = threading.Thread(
        target=_watch, args=(deadline, seconds, exit_status), name="hypersweep-way-out", daemon=True
    )
    watch.start()


def end() -> None:
    """No way out under way any more (a campaign round closed its executor and the next one starts), unless the
    process is leaving (a watchdog is armed)."""
    global _deadline
    with _lock:
        if not _armed:
            _deadline = None


def left(cap: float) -> float:
    """Seconds a wait of at most ``cap`` may take now: ``cap``, or what is left of the way out under way."""
    with _lock:
        deadline = _deadline
    return cap if deadline is None else max(0.0, min(cap, deadline - time.monotonic()))


def last_words(line: str) -> None:
    """What the watchdog says after its own line when it ends the process (the resume command)."""
    with _lock:
        _last_words[:] = [line]


def ran_out(what: str, seconds: float, then: str = "leaving it") -> None:
    """Say that a wait for ``what`` ran out after ``seconds``, and what the way out does instead."""
    line = f"{what} within {seconds:.3g} s; {then}"
    log.warning("%s", line)
    _say(line)


def on_loop(loop: Any, call: Callable[[], Awaitable[Any] | Any], cap: float, what: str) -> bool:
    """Run ``call`` on ``loop`` (a Dask client's or cluster's tornado ``IOLoop``), awaiting what it returns, for
    at most :func:`left` of ``cap`` seconds; True when it ended in time. An error is logged, a wait that runs out
    said (``what``: "the Dask client did not send the cancel of its tasks", ...); neither raises."""
    seconds = left(cap)

    async def run() -> None:
        result = call()
        if inspect.isawaitable(result):
            await result

    async def bounded() -> None:
        await asyncio.wait_for(run(), seconds)

    coroutine = bounded()
    try:
        future = asyncio.run_coroutine_threadsafe(coroutine, loop.asyncio_loop)
    except Exception as exc:  # noqa: BLE001 - a loop already closed: nothing to wait for
        coroutine.close()
        log.debug("%s: %r", what, exc)
        return False
    try:
        future.result(timeout=seconds + 1.0)  # the loop itself may be stuck: then this bound holds
    except (TimeoutError, concurrent.futures.TimeoutError):
        ran_out(what, seconds)
        return False
    except Exception as exc:  # noqa: BLE001 - the way out goes on (a closed client, a lost scheduler)
        log.debug("%s: %r", what, exc)
        return False
    return True


def close_within(closing: Any, cap: float, what: str) -> None:
    """``closing.close(timeout=...)`` (a Dask client or cluster) within :func:`left` of ``cap`` s; past it a line
    (``what``: "the Dask client did not close"), never an error: it runs as the campaign ends, where an error would
    take the place of what ended it (a Ctrl-C's exit 130 and resume line)."""
    seconds = left(cap)
    try:
        closing.close(timeout=seconds)
    except TimeoutError:
        ran_out(what, seconds, "going on")
    except Exception as exc:  # noqa: BLE001 - closing goes on (a loop already closed, a lost scheduler)
        log.debug("%s: %r", what, exc)


def joined(thread: threading.Thread, cap: float, what: str) -> bool:
    """Wait for ``thread`` for at most :func:`left` of ``cap`` seconds; whether it ended (else ``what`` is said)."""
    seconds = left(cap)
    thread.join(timeout=seconds)
    if thread.is_alive():
        ran_out(what, seconds)
        return False
    return True


def _say(line: str) -> None:
    stream = sys.__stderr__
    if stream is not None:
        with contextlib.suppress(OSError, ValueError):
            stream.write(f"hypersweep: {line}\n")
            stream.flush()


def _watch(deadline: float, seconds: float, exit_status: int) -> None:
    while (rest := deadline - time.monotonic()) > 0:
        time.sleep(min(rest, 1.0))
    _say(f"the way out did not end within {seconds:g} s (its bound); exiting now, without waiting more")
    with _lock:
        words = list(_last_words)
    for line in words:
        _say(line)
    _end_children()
    os._exit(exit_status)


def _end_children() -> None:
    """SIGKILL every process this one started, and theirs (an embedded worker, the sampler's child)."""
    import psutil

    with contextlib.suppress(psutil.Error):
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.kill()
