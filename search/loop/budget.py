"""The campaign's budget: how many trials it may still ask, and whether time is left to start them.

One object, read by the campaign (which alone knows where every asked trial is: in the supply,
running, waiting to be told) instead of closures handed to the parts of the loop.
"""

from __future__ import annotations

from collections.abc import Callable

from search.loop.hooks import CampaignHooks

__all__ = ["Budget"]


class Budget:
    """``n_trials`` trials and ``seconds`` of time (``<= 0``: no time limit) from ``clock()`` at construction.

    A hook that stopped the campaign (:class:`~search.loop.hooks.CampaignHooks`) spends both: no trial is asked
    or started after it (running ones finish either way); so does a closed ``gate`` (a resource budget's,
    :class:`~search.loop.resource_budget.ResourceBudget`).
    """

    def __init__(self, n_trials: int, seconds: float, clock: Callable[[], float], hooks: CampaignHooks) -> None:
        self.n_trials = n_trials
        self.seconds = seconds
        self._clock = clock
        self._hooks = hooks
        self.started = clock()
        self.gate: Callable[[], bool] = lambda: True  # a resource budget's: whether one more trial fits

    @property
    def stopped(self) -> bool:
        """A hook stopped the campaign."""
        return self._hooks.stopped

    def elapsed(self) -> float:
        return self._clock() - self.started

    def seconds_left(self) -> float | None:
        """Seconds of the time budget left (None: no time budget)."""
        return max(0.0, self.seconds - self.elapsed()) if self.seconds > 0 else None

    def time_left(self) -> bool:
        return self.seconds <= 0 or self.elapsed() < self.seconds

    def may_start(self) -> bool:
        """New trials may start: time is left and no hook stopped the campaign."""
        return self.time_left() and not self.stopped and self.gate()

    def trials_left(self, spent: int) -> int:
        """Trials not asked yet, ``spent`` being those finished or in hand (asked, queued, running, waiting)."""
        if self.stopped or not self.gate():
            return 0
        return max(0, self.n_trials - spent)
