"""An Optuna objective as a trainer: ``ObjectiveTrainer(objective, metrics)(config, reporter) -> metrics``.

The objective's return value is the study's metric (a number), or its metrics in order (a tuple or list, for a
multi-objective study). ``optuna.TrialPruned`` raised by the objective ends the trial PRUNED; any other exception
fails it, with its traceback in the trial's log, as a trainer's would. The wrapper carries the objective's module
and name, so the campaign names it (``[trainer] entry = "__main__:objective"``), and it pickles with the objective
(by value when the objective was defined in a script or notebook).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any

import optuna

from search.objective.trial import ObjectiveTrial
from trainers.api import Reporter, TrialConfig, register_trainer

__all__ = ["ObjectiveTrainer", "as_trainer", "values_as_metrics"]


class ObjectiveTrainer:
    """``fit(config, reporter)`` that runs ``objective(trial)`` (see the module)."""

    def __init__(self, objective: Callable[[Any], Any], metrics: Sequence[str]) -> None:
        if not callable(objective):
            raise TypeError(f"objective={objective!r}: must be a function objective(trial)")
        if not metrics:
            raise ValueError("metrics=(): an objective needs at least one metric name")
        self.objective = objective
        self.metrics = tuple(str(m) for m in metrics)
        self.__module__ = getattr(objective, "__module__", None) or "__main__"
        self.__qualname__ = getattr(objective, "__qualname__", None) or type(objective).__qualname__

    def __call__(self, config: TrialConfig, reporter: Reporter) -> dict[str, float]:
        trial = ObjectiveTrial(config, reporter, self.metrics)
        try:
            returned = self.objective(trial)
        except optuna.TrialPruned:
            trial.pruned()
            return {}
        return values_as_metrics(returned, self.metrics)

    def __repr__(self) -> str:
        return f"<ObjectiveTrainer {self.__module__}:{self.__qualname__} -> {', '.join(self.metrics)}>"


def values_as_metrics(returned: Any, metrics: Sequence[str]) -> dict[str, float]:
    """What the objective returned, as ``{metric: value}``: one number, or one per metric (a tuple or list)."""
    values = list(returned) if isinstance(returned, (tuple, list)) else [returned]
    if len(values) != len(metrics):
        raise ValueError(
            f"the objective returned {len(values)} value(s) ({returned!r}) for {len(metrics)} objective(s) "
            f"({', '.join(metrics)})"
        )
    for value in values:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(
                f"the objective returned {returned!r}: return a number (a tuple of numbers: multi-objective)"
            )
    return {name: float(value) for name, value in zip(metrics, values)}


def as_trainer(fn: Any, entry: str, metrics: Sequence[str]) -> ObjectiveTrainer:
    """``fn`` (an objective, or one already wrapped) as the trainer registered under ``entry`` in this process, so the
    campaign ships, keeps and re-runs the wrapper (``[trainer] objective = true`` named by the CLI too)."""
    trainer = fn if isinstance(fn, ObjectiveTrainer) else ObjectiveTrainer(fn, metrics)
    register_trainer(trainer, entry)
    return trainer
