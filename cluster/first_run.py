"""Whether a Dask task runs for the first time: a trial is attempted only as often as the controller decides.

Dask runs a task again, on another worker, when the worker running it dies (up to the scheduler's
``allowed-failures`` times, which the controller cannot set on a cluster it joins). A named
``distributed.Event`` per task, ``<key>-ran`` on the scheduler, says that it ran before; a task that finds it
set ends at once as lost, and the controller's retry policy decides.

The question goes to the scheduler when the task enters the worker's queue (:class:`cluster.plugins.AskFirstRun`,
a worker plugin the executor registers), so its round trip overlaps the wait for a slot; a worker without the
plugin asks as the task starts. The answer is read as the trial starts, before it says so or writes anything.
The event is then set without waiting (a worker dying within that millisecond lets Dask run the trial once more,
which only a death in the first moments of a trial could cause).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import re
from typing import Any

__all__ = ["FirstRun", "RanBefore", "ask_early", "forget_early", "trial_key"]

log = logging.getLogger(__name__)

ANSWER_TIMEOUT = 30.0  # seconds to wait for the scheduler's answer
TRIAL_KEY = re.compile(r"-trial-\d+-\d+$")  # what :func:`trial_key` makes
_EARLY: dict[str, concurrent.futures.Future[Any]] = {}  # this worker's answers, asked while their tasks queued


def trial_key(topic: str, number: int, unique: int) -> str:
    """The Dask key of a task whose first trial is ``number`` (``unique``: apart from earlier tasks of it)."""
    return f"{topic}-trial-{number}-{unique}"


def _ask(worker: Any, name: str, op: str) -> concurrent.futures.Future[Any]:
    """Send ``op`` (an event handler of the scheduler's) for event ``name`` over the worker's own connection."""
    rpc = getattr(worker.scheduler, op)
    return asyncio.run_coroutine_threadsafe(rpc(name=name), worker.loop.asyncio_loop)


def ask_early(worker: Any, key: str) -> None:
    """Ask now whether task ``key`` (queued at ``worker``) ran before; its :class:`FirstRun` takes the answer."""
    if TRIAL_KEY.search(key) and key not in _EARLY:
        _EARLY[key] = _ask(worker, f"{key}-ran", "event_is_set")


def forget_early(key: str) -> None:
    """Task ``key`` left this worker without running: drop its answer."""
    _EARLY.pop(key, None)


class RanBefore(BaseException):  # noqa: N818 - not an error of the trial's: it must pass its ``except Exception``
    """Raised where the trainer would be called, when the task ran before; :func:`cluster.task_runner.run_once`
    turns it into a lost outcome for each of the task's trials."""


class FirstRun:
    """On a worker, inside task ``key``: asks at once whether the task ran before; :meth:`check` reads the answer.

    ``fresh``: the key was never handed out before (a trial sent to a slot runner the first time, which no Dask
    task can run again): it cannot have run, so nothing is asked; the mark is still set for a later send."""

    def __init__(self, key: str, fresh: bool = False) -> None:
        from distributed import get_worker

        self._name = f"{key}-ran"
        self._worker: Any = get_worker()
        self._first: bool | None = None
        self._answer: concurrent.futures.Future[Any] | None = None  # None: a fresh key, not asked
        if not fresh:
            early = _EARLY.pop(key, None)
            self._answer = early if early is not None else self._call("event_is_set")

    def _call(self, op: str) -> concurrent.futures.Future[Any]:
        return _ask(self._worker, self._name, op)

    def check(self) -> None:
        """Raise :class:`RanBefore` unless this is the task's first run (waits for the answer the first time, then
        sets the event without waiting)."""
        if self._first is None:
            self._first = self._answer is None or not bool(self._answer.result(timeout=ANSWER_TIMEOUT))
            if self._first:
                self._call("event_set").add_done_callback(_log_failure)
        if not self._first:
            raise RanBefore(self._name)


def _log_failure(future: concurrent.futures.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("could not mark a trial's task as run: %s", future.exception())
