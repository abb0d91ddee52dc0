"""``[study] slot_hours`` / ``gpu_hours``: a budget in resources, slots x seconds of every run.

Spent: the slot-seconds of every run that ended (:attr:`~search.loop.costs.TrialCosts.spent`: pruned, failed and
lost runs too; a resumed campaign's earlier trials too) plus the running trials' predicted whole runs (what they ran
and what the trial model says they still need). A trial starts while one more trial's predicted cost (the mean of
those so far, :meth:`~search.loop.costs.TrialCosts.per_trial`) fits in what is left; each one launched takes that
much of it until the next look. Before any cost is known the first trials start. Once the next trial does not fit,
asking stops and one line says so; the spend then ends within about one trial's cost of the budget.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable

from cluster.trial_cost import Estimate
from search.loop.costs import HOUR, TrialCosts, refresh_interval
from search.loop.dispatch import CampaignError
from search.loop.trials import RunningTrial

__all__ = ["ResourceBudget", "HOUR", "resource_budget"]

log = logging.getLogger(__name__)


class ResourceBudget:
    """``limit`` slot-seconds (``unit``: how the user wrote it, ``"slot-hours"`` or ``"GPU-hours"``; ``per_slot``:
    units of it one slot-hour is: a slot's GPUs for GPU-hours, else 1)."""

    def __init__(
        self, hours: float, unit: str, per_slot: float, costs: TrialCosts, notify: Callable[[str], None]
    ) -> None:
        if not hours > 0 or not per_slot > 0:
            raise ValueError(f"hours={hours!r}, per_slot={per_slot!r}: both must be > 0")
        self.hours, self.unit, self.per_slot = hours, unit, per_slot
        self.limit = hours * HOUR / per_slot  # slot-seconds
        self._costs = costs
        self._notify = notify
        self._room = self.limit
        self._looked = -math.inf  # when it last looked
        self._next = Estimate(0.0, 0.0, 0.0)
        self.closed = ""  # the line that said no more trials start

    def look(self, running: Iterable[RunningTrial], now: float) -> None:
        """What is left after what ended and the running trials' predicted whole runs (worked out at most once per
        :func:`~search.loop.costs.refresh_interval`; meanwhile a run that ends stays counted at its prediction, and
        each trial launched takes one trial's predicted cost)."""
        running = list(running)
        if now - self._looked < refresh_interval(len(running)):
            return
        self._looked = now
        committed = 0.0
        for r in running:
            ran = max(0.0, now - r.started_at) if r.started_at is not None else 0.0
            committed += (
                ran + self._costs.left(r.config.params, r.width, r.config.epochs, r.started_at, now).mean
            ) * r.width
        self._room = self.limit - self._costs.spent - committed
        self._next = self._costs.per_trial(running)

    def took(self, trials: int) -> None:
        """``trials`` launched since the last look: each takes one trial's predicted cost."""
        self._room -= trials * self._next.mean

    def left(self) -> float:
        """Slot-seconds not spent or committed."""
        return self._room

    def open(self) -> bool:
        """Whether one more trial fits (no cost known yet: while anything is left)."""
        fits = self._room >= self._next.mean if self._next.known else self._room > 0
        if not fits and not self.closed:
            self.closed = self._line()
            log.warning(self.closed)
            self._notify(self.closed)
        return fits

    def _line(self) -> str:
        to_unit = self.per_slot / HOUR
        committed = (self.limit - self._room) * to_unit
        one = self._next
        cost = (
            f"one more trial is expected to cost {one.mean * to_unit:.3g} ({one.low * to_unit:.3g}-"
            f"{one.high * to_unit:.3g})"
            if one.known
            else "nothing is left"
        )
        return (
            f"[study] {self.unit.replace('-', '_').lower()} = {self.hours:g}: {committed:.3g} {self.unit} spent or "
            f"committed to running trials and {cost}: no more trials start"
        )


def resource_budget(
    slot_hours: float, gpu_hours: float, gpus: float, resource: str, costs: TrialCosts, notify: Callable[[str], None]
) -> ResourceBudget | None:
    """The campaign's resource budget (None: none): ``[study] slot_hours``, or ``gpu_hours`` with ``gpus`` GPUs a
    slot (``[trainer] gpus``) on a cluster whose slots are ``resource``."""
    if slot_hours > 0:
        return ResourceBudget(slot_hours, "slot-hours", 1.0, costs, notify)
    if gpu_hours <= 0:
        return None
    if resource != "GPU":
        raise CampaignError(
            f"[study] gpu_hours = {gpu_hours:g}: the cluster's slots are {resource} slots, not GPUs; "
            "give the budget as slot_hours"
        )
    return ResourceBudget(gpu_hours, "GPU-hours", gpus, costs, notify)
