"""Placement that finishes in time (``[study] time_budget``): the longest predicted trial first, none started that is
predicted to run past the time left.

Among the trials asked and waiting (:attr:`~search.loop.supply.TrialSupply.pending`: a campaign with a time budget
asks as many as free slots and the queue at the workers hold before it launches), the one the trial model predicts
to take longest goes first, so the long ones are not the last to start (longest processing time first). A trial
whose predicted duration (its mean) is longer than the time left does not start: one line says so, and no trial
starts after it (those asked end PRUNED, never started); the running ones go on to the end of the budget. A trial
the model knows nothing about yet is taken to fit.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from cluster.trial_cost import Estimate
from search.loop.budget import Budget
from search.loop.costs import TrialCosts
from search.loop.eta import duration_text
from search.loop.trials import Prepared, RunningTrial

__all__ = ["Placement"]

log = logging.getLogger(__name__)


class Placement:
    """Orders the waiting trials and refuses one that would not finish (see the module's docstring)."""

    def __init__(self, costs: TrialCosts, budget: Budget, notify: Callable[[str], None]) -> None:
        self._costs = costs
        self._budget = budget
        self._notify = notify
        self.closed = ""  # the line that said no more trials start

    def seconds(self, prepared: Prepared) -> float:
        """The trial's predicted duration (0: not known, or it cannot run)."""
        config = prepared.config
        if config is None:
            return 0.0
        return self._costs.duration(config.params, prepared.width, config.epochs).mean

    def order(self, pending: deque[Prepared]) -> None:
        """The longest predicted first (a stable sort: equal ones keep their order)."""
        if len(pending) > 1:
            ranked = sorted(pending, key=self.seconds, reverse=True)
            pending.clear()
            pending.extend(ranked)

    def fits(self, group: Sequence[Prepared], queued_behind: Iterable[RunningTrial] = (), now: float = 0.0) -> bool:
        """Whether ``group`` is predicted to end within the time left (after it, nothing starts); one that will queue
        behind ``queued_behind`` (the running trials, when no slot is free) starts when the first of them is
        predicted to end."""
        left = self._budget.seconds_left()
        if left is None or self.closed:
            return not self.closed
        waits = [self._costs.left(r.config.params, r.width, r.config.epochs, r.started_at, now) for r in queued_behind]
        left -= min((w.mean for w in waits if w.known), default=0.0)
        longest = max(group, key=self.seconds)
        predicted = self._costs.duration(longest.config.params, longest.width, longest.config.epochs)  # type: ignore[union-attr]
        if not predicted.known or predicted.mean <= left:
            return True
        self.closed = (
            f"trial {longest.trial.number} is predicted to take {duration_text(predicted.mean)}{_span(predicted)} "
            "but the time budget has "
            f"{duration_text(max(0.0, left))} left when it would start: no more trials start"
        )
        log.warning(self.closed)
        self._notify(self.closed)
        return False


def _span(estimate: Estimate) -> str:
    low, high = duration_text(estimate.low), duration_text(estimate.high)
    return f" ({low}-{high})" if low != high else ""
