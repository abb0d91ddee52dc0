"""The fallback with few points: the values of the nearest configurations seen (an exact match counts alone)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from .estimate import Z90, Basis, Estimate

__all__ = ["param_distance", "nearest_values", "log_spread_estimate", "ONE_POINT_SPREAD"]

#: The log-spread taken when one value is all there is: a factor of 2 either way is one standard deviation.
ONE_POINT_SPREAD = math.log(2.0)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def param_distance(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    """How far two configurations are: per parameter, 1 for a different label or a missing one, for
    numbers their distance in doublings (log2) where both are positive, else their relative difference."""
    total = 0.0
    for key in set(a) | set(b):
        x, y = a.get(key), b.get(key)
        nx, ny = _number(x), _number(y)
        if nx is not None and ny is not None:
            if nx > 0 and ny > 0:
                total += abs(math.log2(nx) - math.log2(ny))
            else:
                total += abs(nx - ny) / (abs(nx) + abs(ny) or 1.0)
        else:
            total += 0.0 if x == y else 1.0
    return total


def nearest_values(config: Mapping[str, Any], seen: Sequence[tuple[Mapping[str, Any], float]], k: int) -> list[float]:
    """The values of the ``k`` configurations in ``seen`` nearest ``config``; those of exact matches alone."""
    ranked = sorted(seen, key=lambda point: param_distance(config, point[0]))
    exact = [value for other, value in ranked if param_distance(config, other) == 0.0]
    return exact or [value for _, value in ranked[:k]]


def log_spread_estimate(values: Sequence[float], basis: Basis = Basis.NEAREST) -> Estimate:
    """A lognormal through ``values`` (> 0): the mean of their log mean and log standard deviation; a 90% interval
    from that deviation (one value: :data:`ONE_POINT_SPREAD`) widened for the mean's own error."""
    logs = [math.log(v) for v in values if v > 0]
    if not logs:
        return Estimate(0.0, 0.0, 0.0)
    centre = statistics.fmean(logs)
    seen = statistics.stdev(logs) if len(logs) > 1 else 0.0
    spread = seen if len(logs) > 1 else ONE_POINT_SPREAD
    return lognormal(centre, spread * math.sqrt(1.0 + 1.0 / len(logs)), basis, len(logs), seen)


def lognormal(centre: float, spread: float, basis: Basis, n: int, scatter: float | None = None) -> Estimate:
    """The mean of ``exp(N(centre, scatter**2))`` (``scatter``: the values' own spread, ``spread`` when None) and
    the 90% interval of ``exp(N(centre, spread**2))`` (``spread``: a new value's, the mean's own error in it)."""
    cap = 700.0  # exp() overflows past 709: a wild extrapolation saturates instead
    scatter = spread if scatter is None else scatter
    mean = math.exp(min(cap, centre + scatter**2 / 2))
    low = math.exp(min(cap, centre - Z90 * spread))
    high = math.exp(min(cap, centre + Z90 * spread))
    return Estimate(mean, min(low, mean), max(high, mean), basis, n)
