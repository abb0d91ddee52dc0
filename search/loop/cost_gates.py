"""What the trial model decides and predicts in the loop, in one holder: the resource budget (``[study] slot_hours``
/ ``gpu_hours``), placement with a time budget, and the campaign's expected end.

The campaign asks it; it reads :class:`~search.loop.costs.TrialCosts`, which the campaign feeds with reports and
ended runs.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import optuna

from cluster.executor import Slots
from cluster.walltimes import left_share
from search.loop.budget import Budget
from search.loop.costs import TrialCosts, refresh_interval
from search.loop.eta import Eta, EtaLog
from search.loop.placement import Placement
from search.loop.resource_budget import ResourceBudget, resource_budget
from search.loop.segments import Stop
from search.loop.trial_maker import Prepared
from search.loop.trials import RunningTrial
from search.spec.campaign_spec import StudySpec
from search.store.records import StudyAttr
from search.vocab.terms import StopReason
from trainers.api import TrialConfig

__all__ = ["CostGates"]


class CostGates:
    """The resource budget, the placement and the expected end over one campaign's :class:`TrialCosts`."""

    def __init__(
        self, study: StudySpec, costs: TrialCosts, budget: Budget, eta_log: Path, notice: Callable[[str], None]
    ) -> None:
        self.costs = costs
        self._study = study
        self._notice = notice
        self.resources: ResourceBudget | None = None  # set by open() when the run starts
        self.placement = Placement(costs, budget, notice) if study.time_budget > 0 else None
        self._eta_log = EtaLog(eta_log, study.n_trials)  # the ends expected, for the report
        self._eta: tuple[float, Eta | None] = (-math.inf, None)  # when the expected end was last worked out, and it

    def open(self, study: optuna.Study, slots: Slots, gpus: float) -> None:
        """The resource budget on the cluster's slots (:mod:`search.loop.resource_budget`); the slots recorded for
        ``status``."""
        if slots.total:
            study.set_user_attr(StudyAttr.SLOTS, slots.total)  # the width status works the ETA out with
        s = self._study
        self.resources = resource_budget(s.slot_hours, s.gpu_hours, gpus, slots.resource, self.costs, self._notice)

    def may_start_more(self) -> bool:
        """The resource budget has room for one more trial, and the placement has not stopped starting trials."""
        return (self.resources is None or self.resources.open()) and not (self.placement and self.placement.closed)

    def look(self, running: Iterable[RunningTrial], now: float) -> list[tuple[RunningTrial, Stop]]:
        """The running trials to stop for the resource budget (:func:`~search.loop.resource_budget.over_budget`),
        with their stop."""
        if self.resources is None:
            return []
        stop = Stop(StopReason.RESOURCE_BUDGET)
        return [(r, stop) for r in self.resources.look(running, now)]

    def choice(self, free_tasks: int) -> tuple[int, Callable[[deque[Prepared]], None] | None]:
        """How many asked trials the placement chooses among, and its order (none without a time budget)."""
        return (free_tasks, self.placement.order) if self.placement else (0, None)

    def fits(self, group: Sequence[Prepared], behind: Iterable[RunningTrial], now: float) -> bool:
        """``group`` may start now: the placement predicts it ends within the time budget."""
        return self.placement is None or self.placement.fits(group, behind, now)

    def took(self, group: Sequence[Prepared]) -> None:
        """``group`` launched: each takes one trial's predicted cost of the resource budget, a resumed one only the
        part its run has left (:func:`cluster.walltimes.left_share`)."""
        if self.resources is not None:
            self.resources.took(sum(left_share(p.start_epoch, p.config.epochs) if p.config else 1.0 for p in group))

    def refuses(self, running: RunningTrial, config: TrialConfig, start: int) -> str:
        """Why a trial's next run (a later segment, a retry from its checkpoint: ``config`` at the trial's width,
        sent to resume at epoch ``start``) does not start: the placement predicts it past the time budget, or its
        predicted cost, what it has left (:meth:`~search.loop.costs.TrialCosts.rests`) times its slots, does not
        fit the resource budget ("": it starts, and takes that cost of the budget)."""
        number, width, begun = running.number, running.width, running.segment().start_epoch
        if self.placement is not None and (late := self.placement.refuses(number, config, width, begun, start)):
            return late
        if self.resources is None:
            return ""
        rest = self.costs.rests([(config.params, width, config.epochs, begun, start)])[0].times(width)
        epochs = f"epochs {start + 1}-{config.epochs}"
        return self.resources.refuses(number, rest, left_share(start, config.epochs), epochs)

    def eta(
        self,
        running: Sequence[RunningTrial],
        to_start: int,
        slots: int,
        now: float,
        seconds_left: float | None,
        done: int,
    ) -> Eta | None:
        """The campaign's expected end from the trial model, worked out at most once per ``refresh_interval`` (in
        between, the last one less the time since). Nothing running and nothing to start: the run's end, recorded
        beside the ends it expected."""
        if not running and not to_start:
            self._eta_log.close(now)
        if now - self._eta[0] >= refresh_interval(len(running), self.costs.typical_run()):
            cost_left = None if self.resources is None else self.resources.left()
            found = self.costs.eta(running, to_start, slots, now, seconds_left, cost_left)
            self._eta = (now, found)
            self._eta_log.record(done, now, found)
        at, found = self._eta
        return found.aged(now - at) if found is not None else None
