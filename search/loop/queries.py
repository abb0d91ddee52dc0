"""The controller's answers to a define-by-run trial's questions (an Optuna objective running on a worker).

A suggestion is sampled here, by the campaign's sampler, on the trial the campaign asked (``Trial.suggest_*``:
Optuna's own checks, a value the trial already has for that name returned again, an enqueued trial's fixed value
used), and written by the controller, the only writer of the study. ``should_prune`` answers whether the trial was
stopped: the questions of a trial arrive after its reports, and each report has been through the pruner already. A
trial that raised ``TrialPruned`` itself is recorded stopped (``pruned``) by the campaign. The answer's
vocabulary is :mod:`search.objective.messages`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from search.objective.messages import Op, distribution_of
from search.store.records import Attr

__all__ = ["Answer", "answer", "RESERVED_ATTRS"]

RESERVED_ATTRS = frozenset(value for name, value in vars(Attr).items() if name.isupper())  # the controller's own


@dataclasses.dataclass(frozen=True)
class Answer:
    """What goes back to the trial (``reply``), and whether the trial pruned itself (``pruned``: record the stop)."""

    reply: dict[str, Any]
    pruned: bool = False


def answer(trial: optuna.Trial, stop_reason: str, question: Mapping[str, Any]) -> Answer:
    """The answer to ``question`` from the running ``trial`` (``stop_reason``: why it was stopped when that stop
    prunes it, its ``pruned_reason``; "" if it was not, or its stop leads elsewhere: a target reached, a resize).
    A question the controller cannot answer gets ``{"error": ...}``, raised in the trial."""
    op = question.get("op")
    try:
        if op == Op.SUGGEST:
            return Answer({"value": suggest(trial, str(question["name"]), distribution_of(question))})
        if op == Op.SHOULD_PRUNE:
            return Answer({"prune": bool(stop_reason)})
        if op == Op.PRUNED:
            return Answer({}, pruned=not stop_reason)
        if op == Op.USER_ATTR:
            set_user_attr(trial, str(question["key"]), question.get("value"))
            return Answer({})
    except (ValueError, TypeError, KeyError) as exc:
        return Answer({"error": f"{type(exc).__name__}: {exc}".splitlines()[0]})
    return Answer({"error": f"unknown question {op!r}"})


def suggest(trial: optuna.Trial, name: str, distribution: BaseDistribution) -> Any:
    """``trial.suggest_*`` for ``distribution``: the campaign's sampler picks, the study records."""
    if isinstance(distribution, FloatDistribution):  # a builtin (a sampler may give numpy's): it travels as msgpack
        low, high, step, log = distribution.low, distribution.high, distribution.step, distribution.log
        return float(trial.suggest_float(name, low, high, step=step, log=log))
    if isinstance(distribution, IntDistribution):
        low, high = distribution.low, distribution.high
        return int(trial.suggest_int(name, low, high, step=distribution.step, log=distribution.log))
    if isinstance(distribution, CategoricalDistribution):
        return trial.suggest_categorical(name, distribution.choices)
    raise TypeError(f"parameter {name!r}: cannot suggest from {type(distribution).__name__}")


def set_user_attr(trial: optuna.Trial, key: str, value: Any) -> None:
    if key in RESERVED_ATTRS:
        raise ValueError(f"user attribute {key!r} is one the campaign writes itself; pick another name")
    trial.set_user_attr(key, value)
