"""Placement that finishes in time (``[study] time_budget``): the longest predicted trial first, none started that is
predicted to run past the time left.

Among the trials asked and waiting (:attr:`~search.loop.supply.TrialSupply.pending`: a campaign with a time budget
asks as many as free slots and the queue at the workers hold before it launches), the one the trial model predicts
to take longest goes first, so the long ones are not the last to start (longest processing time first). A trial
whose predicted duration (its mean) is longer than the time left does not start: one line says so, and no trial
starts after it (those asked end PRUNED, never started); the running ones go on to the end of the budget. A trial
the model knows nothing about yet is taken to fit. A trial that resumes at epoch ``k`` of ``n``
(:attr:`~search.loop.trials.Prepared.start_epoch`: a resumed campaign's trial, from its segment's start or its last
checkpointed report, :func:`~search.loop.segments.resume_epoch`) is predicted for what it has left, ``(n - k) / n``
of its full run (:func:`cluster.walltimes.left_share`, the job walltime's rule), in the order and in the fit; so is
a running trial a new one would queue behind (a later segment, a retry from its checkpoint, a resumed trial:
:attr:`~search.loop.trials.RunningTrial.start_epoch`, as the dispatcher sent it). The prediction is
:meth:`~search.loop.costs.TrialCosts.rests`, the one the resource budget reads. A trial's next run (a later
segment, a retry) is refused the same way, for what it has left (:meth:`Placement.refuses`), and held
(:mod:`search.loop.next_runs`); it does not stop the new trials.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from cluster.trial_cost import Estimate
from cluster.trial_cost.estimate import UNKNOWN
from search.loop.budget import Budget
from search.loop.costs import TrialCosts, run_of
from search.loop.eta import duration_text, residual
from search.loop.segments import current_segment
from search.loop.trials import Prepared, RunningTrial
from trainers.api import TrialConfig

__all__ = ["Placement"]

log = logging.getLogger(__name__)


class Placement:
    """Orders the waiting trials and refuses one that would not finish (see the module's docstring)."""

    def __init__(self, costs: TrialCosts, budget: Budget, notify: Callable[[str], None]) -> None:
        self._costs = costs
        self._budget = budget
        self._notify = notify
        self.closed = ""  # the line that said no more trials start

    def predicted(self, prepared: Prepared) -> Estimate:
        """The trial's predicted duration, for the epochs its run has left (not known: it cannot run)."""
        config = prepared.config
        if config is None:
            return UNKNOWN
        begun = current_segment(prepared.segments, config, prepared.width).start_epoch
        return self._rest(config, prepared.width, begun, prepared.start_epoch)

    def seconds(self, prepared: Prepared) -> float:
        """The trial's predicted duration's mean (0: not known, or it cannot run)."""
        return self.predicted(prepared).mean

    def _left(self, running: RunningTrial, now: float) -> Estimate:
        """Seconds a running trial (queued: not started) still has, predicted: the epochs its run has left after
        the one it resumed at (:attr:`~search.loop.trials.RunningTrial.start_epoch`), given how long it has run."""
        ran = max(0.0, now - running.started_at) if running.started_at is not None else 0.0
        return residual(self._costs.rests([run_of(running)])[0], ran)

    def _rest(self, config: TrialConfig, width: int, begun: int, start_epoch: int) -> Estimate:
        """A run's predicted duration from ``start_epoch`` on, in a segment begun at ``begun``
        (:meth:`~search.loop.costs.TrialCosts.rests`: its segment's whole run, times the share of it left)."""
        return self._costs.rests([(config.params, width, config.epochs, begun, start_epoch)])[0]

    def refuses(self, number: int, config: TrialConfig, width: int, begun: int, start_epoch: int) -> str:
        """Why trial ``number``'s next run (a later segment begun at epoch ``begun``, a retry from its checkpoint),
        sent to resume at ``start_epoch``, does not start: predicted (its mean) to run past the time left, or no time
        left ("": it starts; a run the model knows nothing about is taken to fit while time is left). It starts in
        the slots its trial held, or as soon as a rung is decided: no queue is counted before it."""
        left = self._budget.seconds_left()
        if left is None:
            return ""
        predicted = self._rest(config, width, begun, start_epoch)
        if left > 0 and (not predicted.known or predicted.mean <= left):
            return ""
        epochs = f"epochs {start_epoch + 1}-{config.epochs}"
        takes = (
            f"is predicted to take {duration_text(predicted.mean)}{_span(predicted)} for {epochs}"
            if predicted.known
            else f"would train {epochs}"
        )
        return f"trial {number}'s next run {takes} but the time budget has {duration_text(max(0.0, left))} left"

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
        waits = [self._left(r, now) for r in queued_behind]
        left -= min((w.mean for w in waits if w.known), default=0.0)
        longest = max(group, key=self.seconds)
        predicted = self.predicted(longest)
        if not predicted.known or predicted.mean <= left:
            return True
        self.closed = (
            f"trial {longest.trial.number} is predicted to take {duration_text(predicted.mean)}{_span(predicted)}"
            f"{_rest(longest)} but the time budget has "
            f"{duration_text(max(0.0, left))} left when it would start: no more trials start"
        )
        log.warning(self.closed)
        self._notify(self.closed)
        return False


def _span(estimate: Estimate) -> str:
    low, high = duration_text(estimate.low), duration_text(estimate.high)
    return f" ({low}-{high})" if low != high else ""


def _rest(prepared: Prepared) -> str:
    """A resumed run's epochs, as the job walltime's line gives them ("": from scratch)."""
    start, epochs = prepared.start_epoch, prepared.config.epochs if prepared.config else 0
    return f" for epochs {start + 1}-{epochs} (it resumes at epoch {start})" if start else ""
