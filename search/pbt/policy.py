"""Population-based training (Jaderberg et al. 2017), decided at the controller.

The population is the campaign's trials, trained in segments of ``interval`` epochs.
Once every member still in the population has ended the segment that ends at epoch
``e`` (the rung at ``e``), :meth:`PBTPolicy.decide_rung` ranks them all: a member in
the bottom ``quantile`` copies the checkpoint of a random top-``quantile`` member
(exploit) and continues with that member's hyperparameters, each multiplied by a
random factor from ``perturb`` or, with ``resample_probability``, drawn afresh from
the space (explore). Everyone else continues as they are. The policy only sees
records and returns decisions; :mod:`search.pbt.population` copies files and the
campaign submits segments.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution, FloatDistribution

from search.spec.pbt import PBT_KEYS, PBTSpec, parse_pbt  # re-exported: the [pbt] section is parsed in search.spec
from search.vocab.terms import Transition

__all__ = ["PBTSpec", "PBT_KEYS", "parse_pbt", "PBTPolicy", "Member", "Decision", "Action", "recorded_schedule"]


Action = Transition
"""A rung's decision for a member is the transition to its next segment: ``continue`` or ``exploit``."""


@dataclasses.dataclass(frozen=True)
class Member:
    """What the policy sees of one member: its latest segment's score and hyperparameters."""

    number: int
    epoch: int
    score: float
    params: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Decision:
    action: Transition
    source: int | None = None
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.action not in (Transition.CONTINUE, Transition.EXPLOIT):
            raise ValueError(f"a PBT decision is 'continue' or 'exploit', not {self.action!r}")


class PBTPolicy:
    """Truncation selection with perturbation over a whole rung; seeded, the same for the same rung."""

    def __init__(self, spec: PBTSpec, maximize: bool, dists: Mapping[str, BaseDistribution], seed: int) -> None:
        self.spec = spec
        self._maximize = maximize
        self._dists = dict(dists)
        self._seed = int(seed)
        self._rng = np.random.default_rng(seed)

    def decide_rung(self, epoch: int, rung: Sequence[Member]) -> dict[int, Decision]:
        """What every member of a complete rung (all members at ``epoch``) does next.

        Ranked best first (a non-finite score last, ties by number), the bottom
        ``max(1, floor(N * quantile))`` members each copy a random member of the top as
        many and explore its hyperparameters; the others continue. Fewer than two
        members: everyone continues. The choices are drawn from a generator seeded with
        the policy's seed and ``epoch``, so a rung decides the same after ``resume``.
        """
        ranked = sorted(rung, key=self._rank_key)
        decisions = {m.number: Decision(Action.CONTINUE, params=dict(m.params)) for m in ranked}
        if len(ranked) < 2:
            return decisions
        cut = max(1, int(math.floor(len(ranked) * self.spec.quantile)))
        top, bottom = ranked[:cut], ranked[-cut:]
        self._rng = np.random.default_rng([self._seed, int(epoch)])
        for member in bottom:
            source = top[int(self._rng.integers(len(top)))]
            decisions[member.number] = Decision(Action.EXPLOIT, source.number, self._explore(source.params))
        return decisions

    def _rank_key(self, member: Member) -> tuple[bool, float, int]:
        finite = math.isfinite(member.score)
        score = member.score if finite else 0.0
        return (not finite, -score if self._maximize else score, member.number)

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
