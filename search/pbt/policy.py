"""Population-based training (Jaderberg et al. 2017), decided at the controller.

The population is the campaign's trials, all training at once in segments of
``interval`` epochs. When a member ends a segment, :class:`PBTPolicy` compares its
score with the latest scores of the others: a member in the bottom ``quantile``
copies the checkpoint of a random top-``quantile`` member (exploit) and continues
with that member's hyperparameters, each multiplied by a random factor from
``perturb`` or, with ``resample_probability``, drawn afresh from the space
(explore). Everyone else continues as they are. The policy only sees records and
returns decisions; the campaign copies files and submits segments.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution, FloatDistribution

from search.spec.pbt import PBT_KEYS, PBTSpec, parse_pbt  # re-exported: the [pbt] section is parsed in search.spec

__all__ = ["PBTSpec", "PBT_KEYS", "parse_pbt", "PBTPolicy", "Member", "Decision", "Action", "recorded_schedule"]


class Action(enum.Enum):
    CONTINUE = "continue"
    EXPLOIT = "exploit"


@dataclasses.dataclass(frozen=True)
class Member:
    """What the policy sees of one member: its latest segment's score and hyperparameters."""

    number: int
    epoch: int
    score: float
    params: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Decision:
    action: Action
    source: int | None = None
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)


class PBTPolicy:
    """Truncation selection with perturbation; seeded, deterministic for an order of events."""

    def __init__(self, spec: PBTSpec, maximize: bool, dists: Mapping[str, BaseDistribution], seed: int) -> None:
        self.spec = spec
        self._maximize = maximize
        self._dists = dict(dists)
        self._rng = np.random.default_rng(seed)

    def decide(self, member: Member, population: Sequence[Member]) -> Decision:
        """What ``member`` does next, given every member's record at the same epoch (itself included).

        Ranking members at equal epochs keeps a member that arrives early from being
        judged against members that trained longer. Until the rung holds enough
        members for one of them to be in the bottom quantile (``ceil(1/quantile)``),
        everyone continues.
        """
        ranked = sorted(population, key=lambda m: m.score, reverse=self._maximize)  # best first
        cut = max(1, int(math.floor(len(ranked) * self.spec.quantile)))
        enough = len(ranked) >= math.ceil(1.0 / self.spec.quantile)
        if not enough or member.number not in {m.number for m in ranked[-cut:]}:
            return Decision(Action.CONTINUE, params=dict(member.params))
        top = [m for m in ranked[:cut] if m.number != member.number]
        if not top:
            return Decision(Action.CONTINUE, params=dict(member.params))
        source = top[int(self._rng.integers(len(top)))]
        return Decision(Action.EXPLOIT, source.number, self._explore(source.params))

    def _explore(self, params: Mapping[str, Any]) -> dict[str, Any]:
        new = dict(params)
        for name in self.spec.hyperparams:
            dist = self._dists[name]
            assert isinstance(dist, FloatDistribution)
            if self._rng.random() < self.spec.resample_probability:
                new[name] = self._resample(dist)
            else:
                factor = self.spec.perturb[int(self._rng.integers(len(self.spec.perturb)))]
                new[name] = float(min(dist.high, max(dist.low, float(params[name]) * factor)))
        return new

    def _resample(self, dist: FloatDistribution) -> float:
        if dist.log:
            return float(math.exp(self._rng.uniform(math.log(dist.low), math.log(dist.high))))
        return float(self._rng.uniform(dist.low, dist.high))


def recorded_schedule(history: Sequence[tuple[int, Mapping[str, float]]]) -> list[list[float]]:
    """The learning rate a member followed, as piecewise ``[[first step of the epoch, lr], ...]``.

    Built from each epoch's reported ``lr`` and ``steps`` (steps at the epoch's end);
    consecutive equal rates are merged. Replay it with ``schedule = "piecewise"``.
    """
    points: list[list[float]] = []
    previous_steps = 0.0
    for _step, metrics in history:
        if "lr" not in metrics or "steps" not in metrics:
            continue
        lr = float(metrics["lr"])
        if not points or points[-1][1] != lr:
            points.append([int(previous_steps), lr])
        previous_steps = float(metrics["steps"])
    return points
