"""Never a silent wait for workers: the cluster's slots against what the campaign's waiting trials need.

Every loop iteration the campaign shows the watch the cluster's slots and its trials in flight (sent to the
cluster, or asked and waiting to be sent). Short of slots (none at all, or fewer than the widest of them needs) for ``say_after`` seconds: one line, what the campaign waits
for and since when, on the terminal and in ``campaign.log``, again every ``say_every`` seconds while it lasts, and
one line when slots come back. With no slot at all for ``[cluster] worker_timeout`` seconds: :class:`NoWorkers`
(exit 3); the campaign keeps its trials for ``resume``, as when its scheduler is lost. Backend-independent: it
reads only :meth:`~cluster.executor.TrialExecutor.slots`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

from cluster.errors import ClusterError
from cluster.executor import Slots

__all__ = ["NoWorkers", "SlotWatch", "Waiting", "SAY_AFTER", "SAY_EVERY"]

log = logging.getLogger(__name__)

SAY_AFTER = 10.0  # seconds short of slots before the first line (a worker its nanny restarts is back sooner)
SAY_EVERY = 60.0  # seconds between two lines while the wait lasts


class NoWorkers(ClusterError):
    """The cluster had no slot at all for ``worker_timeout`` seconds (exit 3; the campaign is kept for resume)."""


@dataclasses.dataclass(frozen=True)
class Waiting:
    """The campaign's trials in flight (running, queued, or asked and not yet sent): how many, and the widest one's
    width and number."""

    trials: int
    width: int
    number: int


def _clock_time(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


class SlotWatch:
    """Says when the cluster has too few slots for the waiting trials; raises :class:`NoWorkers` after ``timeout``
    seconds with none at all. ``say``: where a line goes (the terminal; every line is also logged)."""

    def __init__(
        self,
        timeout: float,
        say: Callable[[str], None],
        clock: Callable[[], float] = time.time,
        say_after: float = SAY_AFTER,
        say_every: float = SAY_EVERY,
    ) -> None:
        if timeout <= 0 or say_after < 0 or say_every <= 0:
            raise ValueError(
                f"timeout={timeout!r}, say_after={say_after!r}, say_every={say_every!r}: need timeout > 0, "
                "say_after >= 0 and say_every > 0"
            )
        self._timeout, self._say, self._clock = timeout, say, clock
        self._say_after = min(say_after, timeout / 2)  # the line always comes before the exit
        self._say_every = say_every
        self._short_since: float | None = None  # when the slots fell short of the waiting trials
        self._none_since: float | None = None  # when the cluster last had no slot at all
        self._said_at: float | None = None

    def check(self, slots: Slots, waiting: Waiting | None) -> None:
        """One look: ``slots`` now, ``waiting`` the trials in flight (None: none)."""
        now = self._clock()
        short = waiting is not None and slots.total < waiting.width
        if not short:
            self._back(slots, now)
            return
        assert waiting is not None
        if self._short_since is None:
            self._short_since = now
        if slots.total >= 1:
            self._none_since = None
        elif self._none_since is None:
            self._none_since = now
        due = self._said_at is None and now - self._short_since >= self._say_after
        if due or (self._said_at is not None and now - self._said_at >= self._say_every):
            self._tell(self._line(slots, waiting, now))
            self._said_at = now
        if self._none_since is not None and now - self._none_since >= self._timeout:
            raise NoWorkers(
                f"no worker with a free {slots.resource} slot since {_clock_time(self._none_since)} "
                f"({now - self._none_since:.0f} s, [cluster] worker_timeout = {self._timeout:g} s); "
                f"{waiting.trials} trial(s) in flight"
            )

    def _line(self, slots: Slots, waiting: Waiting, now: float) -> str:
        assert self._short_since is not None
        since = f"since {_clock_time(self._short_since)} ({now - self._short_since:.0f} s)"
        has = f"the cluster has {slots.workers} worker(s) with {slots.total} {slots.resource} slot(s)"
        if slots.total < 1:
            assert self._none_since is not None
            until = _clock_time(self._none_since + self._timeout)
            return (
                f"waiting for a worker with a free {slots.resource} slot {since}: {has}; {waiting.trials} trial(s) "
                f"in flight; exit 3 at {until} if none joins ([cluster] worker_timeout = {self._timeout:g} s)"
            )
        return (
            f"waiting for {waiting.width} {slots.resource} slots for trial {waiting.number} {since}: {has}; "
            f"{waiting.trials} trial(s) in flight"
        )

    def _back(self, slots: Slots, now: float) -> None:
        if self._said_at is not None and self._short_since is not None:
            self._tell(
                f"workers back: {slots.workers} worker(s) with {slots.total} {slots.resource} slot(s), after "
                f"{now - self._short_since:.0f} s"
            )
        self._short_since = self._none_since = self._said_at = None

    def _tell(self, line: str) -> None:
        log.warning("%s", line)
        self._say(line)
