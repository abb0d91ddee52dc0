"""Where trials are sampled: the asker protocol, and the askers that sample on the loop or on a thread.

The controller takes its trials from an :class:`Asker`; three implement it:

- :class:`InlineAsker` asks on the loop's own thread, only when a slot needs a trial
  (deterministic, PBT and simulated campaigns, where the order of asks matters);
- :class:`BackgroundAsker` (below) asks on a thread, ahead of need;
- ``search.sampling.process.ProcessAsker`` asks in a child process, on a replica study.

Background sampling, in detail: a thread that asks trials ahead of need.

The controller's loop sets how many asked trials it wants in hand
(:meth:`BackgroundAsker.want`) and takes them without waiting
(:meth:`BackgroundAsker.take`). A sampler that needs seconds per ask then
delays only the trial it is sampling: finished trials are still told, and
trials already asked are still dispatched, while it works. A fast sampler is
asked on the loop's own thread instead (:meth:`BackgroundAsker.ask_here`):
a thread competing for the interpreter lock with Dask's IO thread costs a
fast sampler more than the ask itself.

Thread safety rests on two facts: Optuna's storages lock their own state, and
every named sampler's ``after_trial`` (called by ``tell`` on the loop's
thread) reads the storage only; it never touches state that ``ask`` uses.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from cluster import way_out

__all__ = ["Asker", "InlineAsker", "BackgroundAsker", "AskFailed", "AskTimes"]

log = logging.getLogger(__name__)

T = TypeVar("T")
EWMA_WEIGHT = 0.2  # weight of the newest ask in the running mean of ask times


class AskTimes:
    """How long asks take: a running mean (the newest weighted ``EWMA_WEIGHT``), the total, the count."""

    def __init__(self) -> None:
        self.ask_seconds = 0.0
        self.busy_seconds = 0.0
        self.asked = 0

    def record(self, seconds: float) -> None:
        self.asked += 1
        self.busy_seconds += seconds
        weight = 1.0 if self.asked == 1 else EWMA_WEIGHT
        self.ask_seconds += weight * (seconds - self.ask_seconds)


class AskFailed(RuntimeError):
    """The sampler raised on the asking thread; the original is the ``__cause__``."""


class Asker(Protocol[T]):
    """What the controller's trial supply needs from whatever samples.

    - ``background``: it samples on its own (a thread, a process) ahead of need;
      ``asks_here``: the loop's thread may ask it directly (``ask_here``).
    - ``want(n, wake_at)``: keep ``n`` trials in hand; wake the loop once ``wake_at`` are ready.
    - ``take()``: a trial asked ahead, or None; ``ask_here()``: ask now, on the caller's thread,
      or None (busy, or never); ``in_hand()``: asked or being asked, not taken.
    - ``times``: how long its asks take.
    - ``close()``: stop; returns what was asked and not taken.
    """

    background: bool
    asks_here: bool
    times: AskTimes

    def want(self, n: int, wake_at: int = 1) -> None: ...

    def take(self) -> T | None: ...

    def ask_here(self) -> T | None: ...

    def in_hand(self) -> int: ...

    def close(self, timeout: float = 30.0) -> list[T]: ...


class InlineAsker(Generic[T]):
    """Asks on the loop's thread, only when a slot needs a trial and ``may_ask()`` allows it."""

    background = False
    asks_here = True

    def __init__(self, produce: Callable[[], T], may_ask: Callable[[], bool]) -> None:
        self._produce = produce
        self._may_ask = may_ask
        self.times = AskTimes()

    def want(self, n: int, wake_at: int = 1) -> None:
        """Nothing is asked ahead."""

    def take(self) -> T | None:
        return None

    def ask_here(self) -> T | None:
        if not self._may_ask():
            return None
        started = time.perf_counter()
        item = self._produce()
        self.times.record(time.perf_counter() - started)
        return item

    def in_hand(self) -> int:
        return 0

    def close(self, timeout: float = 30.0) -> list[T]:
        return []


class BackgroundAsker(Generic[T]):
    """Calls ``produce()`` on its own thread until ``want(n)`` items are in hand."""

    background = True
    asks_here = True  # a fast sampler is asked on the loop's thread (``ask_here``)

    def __init__(
        self,
        produce: Callable[[], T],
        wake: Callable[[], None],
        name: str = "hypersweep-asker",
    ) -> None:
        self._produce = produce
        self._wake = wake
        self._cond = threading.Condition()
        self._ready: deque[T] = deque()
        self._target = 0
        self._wake_at = 1
        self._asking = False
        self._closed = False
        self._error: BaseException | None = None
        self.times = AskTimes()  # of produce(), on either thread
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # --- the loop's side -------------------------------------------------------------------

    def want(self, n: int, wake_at: int = 1) -> None:
        """Keep ``n`` items in hand (asked and not taken, the one being asked included).

        The loop is woken once ``wake_at`` items (or all ``n``) are ready, not after
        every ask: each wake is a loop iteration that competes with the sampler.
        """
        with self._cond:
            self._target = max(0, int(n))
            self._wake_at = max(1, int(wake_at))
            self._cond.notify()

    def in_hand(self) -> int:
        with self._cond:
            return len(self._ready) + (1 if self._asking else 0)

    @property
    def busy(self) -> bool:
        """Whether an ask is in progress."""
        with self._cond:
            return self._asking

    def take(self) -> T | None:
        """An asked item, or None if none is ready; raises :class:`AskFailed` if the sampler raised.

        Taking one also lowers the wanted count by one: the thread asks again only when told to.
        """
        with self._cond:
            if self._error is not None:
                raise AskFailed(f"the sampler failed: {type(self._error).__name__}: {self._error}") from self._error
            if not self._ready:
                return None
            self._target = max(0, self._target - 1)
            return self._ready.popleft()

    def ask_here(self) -> T | None:
        """Ask on the caller's thread (a fast sampler); None if the thread is asking right now."""
        with self._cond:
            if self._asking or self._closed:
                return None
            self._asking = True
        try:
            started = time.perf_counter()
            item = self._produce()
            self.times.record(time.perf_counter() - started)
            return item
        finally:
            with self._cond:
                self._asking = False

    def close(self, timeout: float = 30.0) -> list[T]:
        """Stop asking; wait up to ``timeout`` s for an ask in progress; return what was not taken."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        way_out.joined(self._thread, timeout, "the sampler's ask did not end (that trial stays RUNNING for resume)")
        with self._cond:
            left, self._ready = list(self._ready), deque()
        return left

    # --- the asking thread -------------------------------------------------------------------

    def _run(self) -> None:
        while self._next_turn():
            started = time.perf_counter()
            try:
                item = self._produce()
            except BaseException as exc:  # noqa: BLE001 - handed to the loop's thread, raised there
                with self._cond:
                    self._error, self._asking = exc, False
                self._wake()
                return
            self.times.record(time.perf_counter() - started)
            with self._cond:
                self._ready.append(item)
                self._asking = False
                ready = len(self._ready)
                wake = ready >= min(self._wake_at, max(1, self._target))
            if wake:
                self._wake()

    def _next_turn(self) -> bool:
        """Wait until another item is wanted; False once closed."""
        with self._cond:
            while not self._closed and len(self._ready) >= self._target:
                self._cond.wait()
            if self._closed:
                return False
            self._asking = True
            return True
