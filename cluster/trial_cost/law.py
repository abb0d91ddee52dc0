"""A log-linear law: ``log y = intercept + sum(slope_f * log x_f)``, over a configuration's numeric features.

The fitted form of :class:`~cluster.trial_cost.model.TrialCostModel` and the simulator's ground truth
(:class:`cluster.sim_models.CurveModel`): seconds per example and memory follow such laws in the batch size,
the width and the model's size, to first order.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["LogLinearLaw", "ONE_SLOT", "Resources", "features", "labels"]

WIDTH = "width"  # the feature name of a trial's slot count


@dataclasses.dataclass(frozen=True)
class Resources:
    """What a trial holds: ``width`` slots (its data-parallel width)."""

    width: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.width, int) or self.width < 1:
            raise ValueError(f"width={self.width!r}: must be an int >= 1")


ONE_SLOT = Resources()  # a trial on one slot


def features(params: Mapping[str, Any], resources: Resources) -> dict[str, float]:
    """The log of every positive number among ``params`` (booleans aside), and of the width."""
    out = {WIDTH: math.log(resources.width)}
    for name, value in params.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if value > 0 and math.isfinite(value):
            out[str(name)] = math.log(float(value))
    return out


def labels(params: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters a log-linear law cannot use: labels, booleans, numbers <= 0."""
    found = features(params, Resources())
    return {str(k): v for k, v in params.items() if str(k) not in found}


@dataclasses.dataclass(frozen=True)
class LogLinearLaw:
    """``y = exp(intercept + sum(slopes[f] * log x_f))``, the median of a lognormal of log-spread ``spread``.

    A feature the law names that a configuration lacks (a conditional parameter) counts at ``centre[f]`` (0:
    the value 1).
    """

    intercept: float
    slopes: Mapping[str, float] = dataclasses.field(default_factory=dict)
    spread: float = 0.0
    centre: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not math.isfinite(self.intercept):
            raise ValueError(f"intercept={self.intercept!r}: must be finite")
        if not (math.isfinite(self.spread) and self.spread >= 0):
            raise ValueError(f"spread={self.spread!r}: must be a finite number >= 0")

    @classmethod
    def power(cls, scale: float, spread: float = 0.0, **exponents: float) -> LogLinearLaw:
        """``scale * prod(x_f ** exponents[f])``: e.g. ``power(1e-4, batch_size=-0.7, width=-0.9)``."""
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"scale={scale!r}: must be a finite number > 0")
        return cls(math.log(scale), dict(exponents), spread)

    def log_median(self, feats: Mapping[str, float]) -> float:
        return self.intercept + sum(s * feats.get(f, self.centre.get(f, 0.0)) for f, s in self.slopes.items())

    def __call__(self, params: Mapping[str, Any], resources: Resources = ONE_SLOT) -> float:
        """The law's median value for a configuration."""
        return math.exp(self.log_median(features(params, resources)))
