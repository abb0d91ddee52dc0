"""What a campaign has cost and when it ends, read from its study: ``status``, ``Result.cost`` and ``Result.eta``.

The same trial model as the running controller's (:class:`~search.loop.costs.TrialCosts`), fed with the trials the
study recorded, on the slots the controller recorded when it started (``StudyAttr.SLOTS``). A running trial has run
since it was asked (the study records no start before its end), and a time budget is not applied (the controller's
own ETA, on its progress line, knows both).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from optuna.trial import FrozenTrial, TrialState

from cluster.trial_cost import Resources
from search.loop.costs import HOUR, TrialCosts
from search.loop.eta import Eta, InFlight, estimate_end
from search.spec.campaign_spec import StudySpec, TrainerSpec
from search.store.records import TrialRecord

__all__ = ["CampaignCost", "SECONDS_BELOW", "campaign_cost"]

SECONDS_BELOW = 0.1 * HOUR  # slot-seconds: a campaign without a resource budget that spent less shows seconds


@dataclasses.dataclass(frozen=True)
class CampaignCost:
    """``spent``: slot-seconds of every run (the running trials' so far too); ``budget``: the resource budget in
    slot-seconds (None: none) and ``unit``/``per_slot`` as the spec gave it; ``eta``: the expected end (None: not
    known, or nothing left to run); ``pruned``/``failed``: the shares of the finished trials."""

    spent: float
    budget: float | None
    unit: str
    per_slot: float
    eta: Eta | None
    pruned: float
    failed: float

    @property
    def left(self) -> float | None:
        return None if self.budget is None else max(0.0, self.budget - self.spent)

    def hours(self, slot_seconds: float) -> float:
        """Slot-seconds in the budget's unit (slot-hours or GPU-hours)."""
        return slot_seconds * self.per_slot / HOUR

    @property
    def in_seconds(self) -> bool:
        """Whether costs are shown in slot- or GPU-seconds: a campaign with no resource budget that has spent under
        :data:`SECONDS_BELOW` (a tiny one would read "1e-05 slot-hours"); a budget's own unit otherwise."""
        return self.budget is None and self.spent * self.per_slot < SECONDS_BELOW

    @property
    def shown_unit(self) -> str:
        """The unit :meth:`shown` gives: the budget's (``slot-hours``, ``GPU-hours``), or its seconds."""
        return self.unit.replace("hours", "seconds") if self.in_seconds else self.unit

    def shown(self, slot_seconds: float) -> float:
        """Slot-seconds in :attr:`shown_unit`."""
        return slot_seconds * self.per_slot if self.in_seconds else self.hours(slot_seconds)

    def lines(self, now: float | None = None, round_label: str = "") -> list[str]:
        """The cost line, and the expected end's (``round_label``: the round of a sweep in rounds that it is the end
        of, ``round 2``: said with it)."""
        spent = f"  cost: {self.shown(self.spent):.3g} {self.shown_unit} spent"
        if self.budget is not None and self.left is not None:
            spent += f" of {self.shown(self.budget):.3g} ({self.shown(self.left):.3g} left)"
        lines = [spent]
        if self.eta is not None:
            end = time.strftime("%H:%M:%S", time.localtime((now or time.time()) + self.eta.left.mean))
            rates = f"; finished trials {self.pruned:.0%} pruned, {self.failed:.0%} failed"
            of = f"{round_label} " if round_label else ""
            lines.append(f"  expected end {end}: {of}{self.eta.text()} (90%; {self.eta.to_start} to start{rates})")
        return lines


def campaign_cost(
    study: StudySpec,
    trainer: TrainerSpec,
    trials: Sequence[FrozenTrial],
    slots: int | None = None,
    now: float | None = None,
) -> CampaignCost:
    """The cost and expected end of a campaign whose own trials (warm-start copies left out) are ``trials`` on
    ``slots`` slots (None: as many as the running trials take)."""
    now = time.time() if now is None else now
    records = [TrialRecord.of(t) for t in trials]
    costs = TrialCosts()
    costs.load(r for r in records if r.state.is_finished())
    running = [(t, r) for t, r in zip(trials, records) if r.state == TrialState.RUNNING]
    in_flight, spent = [], costs.spent
    for trial, record in running:  # each one's seconds so far: a lower bound on its run (a censored point)
        started = trial.datetime_start.timestamp() if trial.datetime_start else now
        costs.model.observe_running(record.number, record.params, Resources(record.width or 1), now - started)
    for trial, record in running:
        started = trial.datetime_start.timestamp() if trial.datetime_start else now
        width = record.width or 1
        spent += max(0.0, now - started) * width
        epochs = int((record.config or {}).get("epochs") or trainer.epochs)
        in_flight.append(InFlight(costs.duration(record.params, width, epochs), max(0.0, now - started), width))
    finished = [r for r in records if r.state.is_finished()]
    waiting = sum(r.state == TrialState.WAITING for r in records)  # enqueued (a sweep's round), not started: to start
    to_start = waiting + max(0, study.n_trials - len(records))
    width = slots or sum(t.width for t in in_flight)
    eta = (
        estimate_end(in_flight, to_start, costs.seen(in_flight), width, drift=costs.drift(width)) if in_flight else None
    )
    unit, per_slot, hours = (
        ("GPU-hours", trainer.gpus, study.gpu_hours) if study.gpu_hours else ("slot-hours", 1.0, study.slot_hours)
    )
    share = (lambda state: sum(r.state == state for r in finished) / len(finished)) if finished else (lambda _s: 0.0)
    return CampaignCost(
        spent,
        hours * HOUR / per_slot if hours else None,
        unit,
        per_slot,
        eta,
        share(TrialState.PRUNED),
        share(TrialState.FAIL),
    )
