"""Cyclic garbage collection in a process that holds a study: its objects are walked once, not at every collection.

A study's trials (Optuna's ``FrozenTrial`` and their dicts) live as long as the process that loaded
them. CPython runs a full collection each time the objects that survived young collections grow by a
quarter of the long-lived ones, and each full collection walks all of them again. Two remedies:

- :func:`gc_paused`: no collection while a study is restored or replayed (millions of objects made,
  none freed), and afterwards, in a process that owns its heap, what survived moves to the permanent
  generation (``gc.freeze``).
- :class:`SurvivorFreezer`: the campaign's loop does the same for what it keeps as it runs (the trials it
  asks and tells). At 10,000 simulated workers and 30,000 trials, full collections took 11-12 s of the
  controller's 78 s, in pauses of about 0.5 s during which no slot was refilled (bench/NOTES.md, session 19).

Freezing is process-wide: it exempts every object then alive from cyclic collection (reference counting
still frees them). A cycle that becomes garbage after it was frozen would stay, so the freezer also
unfreezes and collects everything every ``SWEEP_SECONDS``. Only a process that owns its heap freezes
(:func:`freeze_after_loads`): the ``hypersweep`` command does, an API user's notebook does not.
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
from collections.abc import Callable, Iterator

__all__ = ["freeze_after_loads", "heap_owned", "gc_paused", "SurvivorFreezer", "FREEZE_SECONDS", "SWEEP_SECONDS"]

FREEZE_SECONDS = 2.0  # how often the loop freezes what survived (a young collection first: ~10 ms)
SWEEP_SECONDS = 600.0  # how often everything is unfrozen and collected: frees cycles that died while frozen

_OWNED = [False]  # whether this process owns its heap: set by the process that does (the CLI)


def freeze_after_loads(enabled: bool = True) -> None:
    """Declare that this process owns its heap: :func:`gc_paused` then freezes what survives a load, and the
    campaign's loop what survives as it runs (:class:`SurvivorFreezer`)."""
    _OWNED[0] = enabled


def heap_owned() -> bool:
    """Whether :func:`freeze_after_loads` was called (and not undone) in this process."""
    return _OWNED[0]


@contextlib.contextmanager
def gc_paused(freeze: bool | None = None) -> Iterator[None]:
    """No cyclic garbage collection while a study is restored or replayed: it allocates millions of objects and
    frees none, and each full collection on the way walks all of them again (at 100,000 trials, 12 of the 15 s
    an unpickle took here). Afterwards, with ``freeze`` (default: whether the process owns its heap), the
    objects alive move to the permanent generation; and collection resumes as it was."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _OWNED[0] if freeze is None else freeze:
            gc.freeze()
        if enabled:
            gc.enable()


class SurvivorFreezer:
    """Called once per loop iteration; every ``interval`` s (default ``FREEZE_SECONDS``) it frees the young cycles and freezes what survived,
    every ``sweep`` s (``SWEEP_SECONDS``) it unfreezes and collects everything first. Does nothing unless ``enabled`` (default:
    whether the process owns its heap) and the collector is on."""

    def __init__(
        self,
        interval: float | None = None,
        sweep: float | None = None,
        enabled: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        interval = FREEZE_SECONDS if interval is None else interval
        sweep = SWEEP_SECONDS if sweep is None else sweep
        for name, value in (("interval", interval), ("sweep", sweep)):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name}={value!r}: must be a number of seconds > 0")
        self._interval, self._sweep = interval, sweep
        self._enabled = heap_owned() if enabled is None else enabled
        self._clock = clock
        self._frozen_at = self._swept_at = clock()
        self.freezes = self.sweeps = 0  # how many (tests, the bench)

    def tick(self) -> None:
        """Freeze (or sweep, then freeze) when it is due."""
        if not self._enabled or not gc.isenabled():
            return
        now = self._clock()
        if now - self._frozen_at < self._interval:
            return
        if now - self._swept_at >= self._sweep:
            gc.unfreeze()
            gc.collect()
            self._swept_at = now
            self.sweeps += 1
        else:
            gc.collect(1)  # the young generations: their dead cycles go before the rest is frozen
        gc.freeze()
        self._frozen_at = now
        self.freezes += 1

    def release(self) -> None:
        """When the campaign ends: what it froze goes back to the collector, so cycles that died while frozen
        (this campaign's, once it is dropped) are freed by its next full collection, not kept until the process
        exits. A process that runs campaigns one after another (the bench, a notebook) holds only the live one."""
        if self.freezes:
            gc.unfreeze()
