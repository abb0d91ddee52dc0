"""The ``trial`` an Optuna objective gets on a worker: Optuna's ``Trial`` methods, answered by the controller.

Every ``suggest_*`` is a round trip to the controller (the reporter's ``query``): its sampler picks the value, its
storage records it, so the controller stays the only writer of the study and the sampler sees every trial. A name
asked twice in one run gets its first value (as in Optuna). Values the trial's config already holds (a trial run
again after a lost worker or a resume, or ``reproduce``) are replayed without asking: what the campaign recorded is
what the objective gets. ``report`` is the trainer's report (``step`` -> the metric), ``should_prune`` asks the
controller whether its pruner stopped the trial after the reports so far (with no controller, e.g. ``reproduce``,
the reporter's ``should_stop``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalChoiceType,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
    check_distribution_compatibility,
)

from search.objective.messages import Op, refused, suggestion
from trainers.api import Reporter, TrialConfig

__all__ = ["ObjectiveTrial", "NotRecorded"]

Query = Callable[[Mapping[str, Any]], Mapping[str, Any]]


class NotRecorded(LookupError):
    """A re-run with no controller (``reproduce``) asked for a parameter the campaign never recorded for the trial."""


class ObjectiveTrial:
    """What an objective written for Optuna calls: ``suggest_float``, ``suggest_int``, ``suggest_categorical``,
    ``report``, ``should_prune``, ``set_user_attr``, ``number``, ``params``, ``distributions``, ``user_attrs``; and
    the campaign's: ``checkpoint_dir`` (the trial's own folder: a trial run again after its worker died finds what
    it saved there), ``seed`` (from the study seed and the trial number), ``devices`` (its GPU lease, as CUDA numbers
    them in its process) and ``config``."""

    def __init__(self, config: TrialConfig, reporter: Reporter, metrics: Sequence[str]) -> None:
        self.config = config
        self._reporter = reporter
        self._metrics = tuple(metrics)
        self._query: Query | None = getattr(reporter, "query", None)  # None: no controller here (reproduce)
        self._recorded = dict(config.params)  # an earlier run's suggestions: replayed
        self._params: dict[str, Any] = {}
        self._distributions: dict[str, BaseDistribution] = {}
        self._user_attrs: dict[str, Any] = {}

    # --- what Optuna's Trial has ----------------------------------------------------------------------

    @property
    def number(self) -> int:
        return self.config.number

    @property
    def params(self) -> dict[str, Any]:
        return dict(self._params)

    @property
    def distributions(self) -> dict[str, BaseDistribution]:
        return dict(self._distributions)

    @property
    def user_attrs(self) -> dict[str, Any]:
        return dict(self._user_attrs)

    def suggest_float(
        self, name: str, low: float, high: float, *, step: float | None = None, log: bool = False
    ) -> float:
        return float(self._suggest(name, FloatDistribution(low, high, log=log, step=step)))

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int:
        return int(self._suggest(name, IntDistribution(low, high, log=log, step=step)))

    def suggest_categorical(self, name: str, choices: Sequence[CategoricalChoiceType]) -> Any:
        return self._suggest(name, CategoricalDistribution(choices))

    def suggest_uniform(self, name: str, low: float, high: float) -> float:
        return self.suggest_float(name, low, high)

    def suggest_loguniform(self, name: str, low: float, high: float) -> float:
        return self.suggest_float(name, low, high, log=True)

    def suggest_discrete_uniform(self, name: str, low: float, high: float, q: float) -> float:
        return self.suggest_float(name, low, high, step=q)

    def report(self, value: float, step: int) -> None:
        """The intermediate ``value`` at ``step``: reported as the study's metric, which the controller's pruner
        reads (a step reported twice keeps its first value, as in Optuna)."""
        self._single_objective("report")
        value = float(value)
        if math.isnan(value) or not isinstance(step, int) or step < 0:
            raise ValueError(f"trial.report({value!r}, step={step!r}): needs a number and an int step >= 0")
        self._reporter.report(step, {self._metrics[0]: value})

    def should_prune(self) -> bool:
        """Whether the controller's pruner stopped this trial, after every report it made so far."""
        self._single_objective("should_prune")
        if self._query is None:
            return bool(self._reporter.should_stop())
        return bool(self._ask({"op": Op.SHOULD_PRUNE.value})["prune"])

    def set_user_attr(self, key: str, value: Any) -> None:
        """Recorded in the study (``FrozenTrial.user_attrs``) by the controller; ``value`` must be JSON (as for
        Optuna's storages: a tuple is kept as a list)."""
        try:
            value = json.loads(json.dumps(value))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"trial.set_user_attr({key!r}, ...): the value must be JSON ({exc})") from None
        if self._query is not None:
            self._ask({"op": Op.USER_ATTR.value, "key": str(key), "value": value})
        self._user_attrs[str(key)] = value

    # --- the campaign's ---------------------------------------------------------------------------------

    @property
    def checkpoint_dir(self) -> Path | None:
        """The trial's folder (``trials/<n>/``): save checkpoints here; None where none is kept (``reproduce``)."""
        return None if self.config.checkpoint_dir is None else Path(self.config.checkpoint_dir)

    @property
    def seed(self) -> int:
        return self.config.seed

    @property
    def devices(self) -> tuple[int, ...]:
        return self.config.devices

    def pruned(self) -> None:
        """The objective raised ``TrialPruned``: the controller records the trial stopped (PRUNED)."""
        if self._query is not None:
            self._ask({"op": Op.PRUNED.value})

    # --- how ------------------------------------------------------------------------------------------

    def _suggest(self, name: str, distribution: BaseDistribution) -> Any:
        if name in self._distributions:  # asked again in this run: its value then
            check_distribution_compatibility(self._distributions[name], distribution)
            return self._params[name]
        if name in self._recorded:
            value = self._recorded[name]
        elif self._query is not None:
            value = self._ask(suggestion(name, distribution))["value"]
        else:
            raise NotRecorded(
                f"trial {self.number}: no recorded value for parameter {name!r} (a re-run replays the campaign's "
                f"suggestions; recorded: {', '.join(self._recorded) or 'none'})"
            )
        self._params[name], self._distributions[name] = value, distribution
        return value

    def _ask(self, request: Mapping[str, Any]) -> Mapping[str, Any]:
        assert self._query is not None
        return refused(self._query(request))

    def _single_objective(self, what: str) -> None:
        if len(self._metrics) > 1:
            raise NotImplementedError(f"Trial.{what} is not supported for multi-objective optimization.")

    def __repr__(self) -> str:
        return f"<ObjectiveTrial {self.number}: {self._params}>"
