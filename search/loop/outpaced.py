"""A sweep's trial that can no longer be its batch size's best is stopped (``[scaling] lr_grid``).

A grid runs every batch size at rates far from its best: the too-low ones would train to the last epoch without
reaching the target. What the sweep needs of such a trial is only that it was worse than the best at its batch size,
which is known as soon as it has run more optimizer steps than the fewest a finished trial of that batch size took to
reach the target (the steps it would take are more, interpolated or not). It is stopped there ("outpaced", told
PRUNED). The best of each batch size, and so the bracket of its rate, is the same as without the stop; which
trials are stopped, and where, depends on the order trials finish in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from optuna.trial import TrialState

from search.loop.segments import Stop
from search.scaling.outcomes import TargetOutcome, outcome_of
from search.scaling.target import TargetGoal
from search.spec.scaling import BATCH
from search.vocab.terms import StopReason, Transition

if TYPE_CHECKING:
    import optuna

    from cluster.outcome import Outcome
    from search.loop.trials import TrialView

__all__ = ["Outpaced"]


class Outpaced:
    """A policy: stop a trial once its steps reach the fewest to target of a finished trial at its batch size."""

    def __init__(self, goal: TargetGoal) -> None:
        self.goal = goal
        self._fewest: dict[int, float] | None = None  # per batch size, read from the study at the first report

    def _read(self, study: optuna.Study) -> dict[int, float]:
        fewest: dict[int, float] = {}
        for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if (
                BATCH in trial.params
                and trial.value is not None
                and outcome_of(trial, self.goal) is TargetOutcome.REACHED
            ):
                b = int(trial.params[BATCH])
                fewest[b] = min(fewest.get(b, math.inf), float(trial.value))
        return fewest

    def on_report(self, running: TrialView, metrics: Mapping[str, float]) -> Stop | None:
        if self._fewest is None:
            self._fewest = self._read(running.trial.study)
        batch = running.config.params.get(BATCH)
        if batch is None or self.goal.reached(metrics) or "steps" not in metrics:
            return None
        outpaced = float(metrics["steps"]) >= self._fewest.get(int(batch), math.inf)
        return Stop(StopReason.OUTPACED, Transition.PRUNE) if outpaced else None

    def on_finished(self, running: TrialView, outcome: Outcome) -> None:
        if not outcome.ok or running.stop_transition is not Transition.TARGET_REACHED or self._fewest is None:
            return None
        batch = running.config.params.get(BATCH)
        if batch is not None:
            steps = self.goal.value(running.history())
            self._fewest[int(batch)] = min(self._fewest.get(int(batch), math.inf), steps)
        return None
