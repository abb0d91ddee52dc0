"""``[study] slot_hours`` / ``gpu_hours``: a budget in resources, slots x seconds of every run.

Spent: the slot-seconds of every run that ended (:attr:`~search.loop.costs.TrialCosts.spent`: pruned, failed and
lost runs too; a resumed campaign's earlier trials too) plus the running trials' predicted runs (what they ran
and what the trial model says they still need), each from the epoch it was sent to resume at (a later segment, a
retry from its checkpoint, a resumed campaign's trial: :meth:`~search.loop.costs.TrialCosts.rests`, as the
placement predicts it). A trial's next run (a later segment, a retry) starts only while its own predicted cost
fits (:meth:`ResourceBudget.refuses`; else it is held: :mod:`search.loop.next_runs`), not one more trial's. A trial starts while one more trial's predicted cost (the mean of
those so far, :meth:`~search.loop.costs.TrialCosts.per_trial`) fits in what is left; each one launched takes that
much of it until the next look (a resumed campaign's trial that resumes at epoch ``k`` of ``n``: ``(n - k) / n`` of
it, :func:`cluster.walltimes.left_share`). Before any cost is known the first trials start. Once the next trial does not fit,
asking stops and one line says so; the spend then ends within about one trial's cost of the budget.

The first wave on many slots starts before any cost is known and may be more than the budget: once the running
trials' whole runs are predicted (from their first epochs, :func:`~search.loop.costs.from_progress`) and overrun
it, those with the most cost left are stopped at their next report (PRUNED, ``stop_reason = "resource budget"``)
until the rest fit; once the spend so far reaches the budget, every running trial is stopped.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence

from cluster.trial_cost import Estimate
from search.loop.costs import HOUR, TrialCosts, refresh_interval
from search.loop.dispatch import CampaignError
from search.loop.trials import RunningTrial

__all__ = ["ResourceBudget", "HOUR", "over_budget", "resource_budget"]

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

    def look(self, running: Iterable[RunningTrial], now: float) -> list[RunningTrial]:
        """What is left after what ended and the running trials' predicted whole runs (worked out at most once per
        :func:`~search.loop.costs.refresh_interval`; meanwhile a run that ends stays counted at its prediction, and
        each trial launched takes one trial's predicted cost). The running trials to stop (:func:`over_budget`)."""
        running = list(running)
        if now - self._looked < refresh_interval(len(running), self._costs.typical_run()):
            return []
        self._looked = now
        lefts = self._costs.lefts(running, now)
        rans = [max(0.0, now - r.started_at) if r.started_at is not None else 0.0 for r in running]
        committed = sum((ran + left.mean) * r.width for r, ran, left in zip(running, rans, lefts))
        self._room = self.limit - self._costs.spent - committed
        self._next = self._costs.per_trial(running)
        so_far = self._costs.spent + sum(ran * r.width for r, ran in zip(running, rans))
        return over_budget(running, lefts, self._room, so_far >= self.limit)

    def took(self, trials: float) -> None:
        """``trials`` launched since the last look: each takes one trial's predicted cost (a resumed run: the part of
        a trial it has left, so ``trials`` need not be whole)."""
        self._room -= trials * self._next.mean

    def refuses(self, number: int, cost: Estimate, share: float, epochs: str) -> str:
        """Why trial ``number``'s next run (a later segment, a retry: ``epochs``, as the line names them) does not
        start: its predicted cost (``cost``, slot-seconds; not known: ``share`` of one more trial's) does not fit in
        what is left ("": it starts, and takes that much of it; no cost known at all: while anything is left)."""
        cost = cost if cost.known else self._next.times(share)
        fits = self._room >= cost.mean if cost.known else self._room > 0
        if fits:
            self._room -= cost.mean if cost.known else 0.0
            return ""
        to_unit = self.per_slot / HOUR
        costs = f"is expected to cost {_amount(cost, to_unit)}" if cost.known else "finds nothing left"
        return (
            f"[study] {self._key()} = {self.hours:g}: {(self.limit - self._room) * to_unit:.3g} {self.unit} spent or "
            f"committed to running trials and trial {number}'s next run ({epochs}) {costs}"
        )

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
        cost = f"one more trial is expected to cost {_amount(one, to_unit)}" if one.known else "nothing is left"
        return (
            f"[study] {self._key()} = {self.hours:g}: {committed:.3g} {self.unit} spent or "
            f"committed to running trials and {cost}: no more trials start"
        )

    def _key(self) -> str:
        """The spec key the budget was given as (``slot_hours``, ``gpu_hours``)."""
        return self.unit.replace("-", "_").lower()


def _amount(cost: Estimate, to_unit: float) -> str:
    """A cost in slot-seconds as the budget's unit, with its interval: ``0.52 (0.31-0.74)``."""
    return f"{cost.mean * to_unit:.3g} ({cost.low * to_unit:.3g}-{cost.high * to_unit:.3g})"


def over_budget(
    running: Sequence[RunningTrial], lefts: Sequence[Estimate], room: float, spent: bool
) -> list[RunningTrial]:
    """The running trials to stop so that the spend ends within the budget: all of them once it is ``spent``;
    while the running trials' predicted whole runs overrun it (``room`` < 0, slot-seconds), those with the most
    predicted cost left first, each saving its time left but one epoch (it stops at its next report), until the
    rest fit. Trials already asked to stop, and those whose run the model cannot tell yet, are left alone."""
    live = [(r, left) for r, left in zip(running, lefts) if not r.stop_reason]
    if spent:
        return [r for r, _left in live]
    stops: list[RunningTrial] = []
    for r, left in sorted(live, key=lambda pair: -pair[1].mean * pair[0].width):
        if room >= 0:
            break
        if not left.known:
            continue
        epoch = left.mean / max(1, r.config.epochs)
        saved = max(0.0, left.mean - epoch) * r.width
        if saved > 0:
            stops.append(r)
            room += saved
    return stops


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
