"""What a define-by-run trial asks the controller, and what the answer holds: plain dicts (they travel as Dask
events up and worker messages down, msgpack types only).

A question is ``{"op": Op, ...}``; an answer ``{"value": ...}`` (a suggestion), ``{"prune": bool}``, ``{}``, or
``{"error": "Type: one line"}`` (raised in the trial as :class:`ControllerRefused`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from optuna.distributions import BaseDistribution, distribution_to_json, json_to_distribution

__all__ = ["Op", "ControllerRefused", "suggestion", "distribution_of", "refused"]


class Op(enum.StrEnum):
    """The questions a trial may ask."""

    SUGGEST = "suggest"
    """``name`` and ``distribution`` (Optuna's JSON): the controller's sampler answers ``value``."""
    SHOULD_PRUNE = "should_prune"
    """Whether the controller stopped the trial (its pruner, after the trial's reports so far): ``prune``."""
    PRUNED = "pruned"
    """The objective raised ``TrialPruned`` itself: the trial ends PRUNED."""
    USER_ATTR = "user_attr"
    """``key`` and ``value``: ``trial.set_user_attr``, written into the study."""


class ControllerRefused(ValueError):
    """The controller could not answer (an incompatible distribution for a name, a reserved attribute name)."""


def suggestion(name: str, distribution: BaseDistribution) -> dict[str, Any]:
    return {"op": Op.SUGGEST.value, "name": str(name), "distribution": distribution_to_json(distribution)}


def distribution_of(request: Mapping[str, Any]) -> BaseDistribution:
    return json_to_distribution(str(request["distribution"]))


def refused(answer: Mapping[str, Any]) -> Mapping[str, Any]:
    """``answer``, or :class:`ControllerRefused` with the controller's line."""
    if "error" in answer:
        raise ControllerRefused(str(answer["error"]))
    return answer
