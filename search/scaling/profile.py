"""The profile likelihood of ``B_crit``: the interval's shape, and the band of curves it admits.

With ``B_noise`` held at ``B0`` the McCandlish model is linear in log space,
``log S = log S_min + log(1 + B0/B)``, so the best ``S_min`` for each ``B0``
and its residual sum of squares ``RSS(B0)`` (on ``log S``, the fit's own
criterion) are closed-form. ``B0 = 0`` (steps flat) and ``B0 = inf`` (steps
``∝ 1/B``) are the two limits and are evaluated exactly, so an interval may
be unbounded on either side.

A confidence set for ``B_crit`` is ``{B0 : RSS(B0) <= RSS_min (1 + q/(n-2))}``
(Bates & Watts 1988, §6.1); :mod:`search.scaling.bootstrap` chooses ``q``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import optimize

__all__ = ["profile_rss", "rss_limits", "likelihood_interval", "profile_curves", "steps_band"]

_DECADES = 12.0  # the grid spans e^-12 x the smallest to e^12 x the largest batch size
_GRID = 1200


def profile_rss(batch_sizes: Sequence[float] | np.ndarray, log_steps: np.ndarray, b0: np.ndarray) -> np.ndarray:
    """``RSS(B0)`` for each ``b0`` (finite, >= 0) against each row of ``log_steps``: shape ``(rows, len(b0))``."""
    b = np.asarray(batch_sizes, dtype=float)
    y = np.atleast_2d(np.asarray(log_steps, dtype=float))
    g = np.log1p(np.asarray(b0, dtype=float)[:, None] / b)  # (m, n)
    d = y[:, None, :] - g[None, :, :]
    d = d - d.mean(axis=2, keepdims=True)
    return (d * d).sum(axis=2)


def rss_limits(batch_sizes: Sequence[float] | np.ndarray, log_steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(RSS(0), RSS(inf))`` per row: the flat model and the pure ``1/B`` model."""
    b = np.asarray(batch_sizes, dtype=float)
    y = np.atleast_2d(np.asarray(log_steps, dtype=float))
    flat = y - y.mean(axis=1, keepdims=True)
    halving = y + np.log(b)
    halving = halving - halving.mean(axis=1, keepdims=True)
    return (flat * flat).sum(axis=1), (halving * halving).sum(axis=1)


def _rss_at(b: np.ndarray, y: np.ndarray, b0: float) -> float:
    if b0 == 0:
        return float(rss_limits(b, y)[0][0])
    if math.isinf(b0):
        return float(rss_limits(b, y)[1][0])
    return float(profile_rss(b, y, np.array([b0]))[0, 0])


def likelihood_interval(
    batch_sizes: Sequence[float], steps: Sequence[float], b_crit: float, q: float
) -> tuple[float, float]:
    """``(low, high)``: the ``B0`` with ``RSS(B0) <= RSS_min (1 + q / (n - 2))`` (their hull).

    ``b_crit`` is the fit's estimate (the minimiser, possibly ``0`` or
    ``inf``); ``low`` is ``0`` when the flat model is inside, ``high`` is
    ``inf`` when the ``1/B`` model is. With ``n = 2`` points (no residual
    degrees of freedom) nothing is excluded: ``(0, inf)``.
    """
    b = np.asarray(batch_sizes, dtype=float)
    y = np.log(np.asarray(steps, dtype=float))[None, :]
    n = len(b)
    if n <= 2 or not math.isfinite(q):
        return 0.0, math.inf
    log_grid = np.linspace(math.log(b.min()) - _DECADES, math.log(b.max()) + _DECADES, _GRID)
    rss = profile_rss(b, y, np.exp(log_grid))[0]
    rss0, rss_inf = (float(v[0]) for v in rss_limits(b, y))
    rss_min = min(float(rss.min()), rss0, rss_inf, _rss_at(b, y, b_crit))
    threshold = rss_min * (1 + max(q, 0.0) / (n - 2)) + 1e-12 * max(rss_min, 1e-300)
    inside = rss <= threshold
    if not inside.any():  # a sharp minimum between grid points (e.g. exact data): the estimate alone
        return float(b_crit), float(b_crit)

    def excess(log_b0: float) -> float:
        return float(profile_rss(b, y, np.array([math.exp(log_b0)]))[0, 0]) - threshold

    def edge(i_out: int, i_in: int) -> float:
        return math.exp(optimize.brentq(excess, log_grid[i_out], log_grid[i_in], xtol=1e-10))

    first, last = int(np.argmax(inside)), int(len(inside) - 1 - np.argmax(inside[::-1]))
    low = 0.0 if rss0 <= threshold else (math.exp(log_grid[0]) if first == 0 else edge(first - 1, first))
    high = (
        math.inf
        if rss_inf <= threshold
        else (math.exp(log_grid[-1]) if last == len(inside) - 1 else edge(last + 1, last))
    )
    if math.isfinite(b_crit):  # the estimate is inside by construction; guard round-off at the edges
        low, high = min(low, b_crit), max(high, b_crit)
    return low, high


def profile_curves(
    batch_sizes: Sequence[float] | np.ndarray, steps: Sequence[float], b0: Sequence[float], x: np.ndarray
) -> np.ndarray:
    """The best-fitting ``S(x)`` with ``B_noise`` held at each ``b0`` (``0``, ``inf`` allowed), one row each."""
    b = np.asarray(batch_sizes, dtype=float)
    y = np.log(np.asarray(steps, dtype=float))
    x = np.asarray(x, dtype=float)
    curves = []
    for value in b0:
        if math.isinf(value):  # S = E_min / B
            curves.append(np.exp(np.mean(y + np.log(b))) / x)
        else:
            s_min = np.exp(np.mean(y - np.log1p(value / b)))
            curves.append(s_min * (1 + value / x))
    return np.array(curves)


def steps_band(
    batch_sizes: Sequence[float],
    steps: Sequence[float],
    interval: tuple[float, float],
    x: np.ndarray,
    points: int = 120,
) -> tuple[np.ndarray, np.ndarray]:
    """``(lower, upper)`` envelope over ``x`` of the fitted curves whose ``B_crit`` lies in ``interval``.

    Each curve is the best fit with ``B_noise`` held at a value of the
    interval (an open end contributes its limit: flat or ``1/B``).
    """
    low, high = (float(v) for v in interval)
    b = np.asarray(batch_sizes, dtype=float)
    lo_fin = low if low > 0 else float(b.min()) * math.exp(-_DECADES)
    hi_fin = high if math.isfinite(high) else float(b.max()) * math.exp(_DECADES)
    values = list(np.geomspace(lo_fin, max(hi_fin, lo_fin), points))
    values += [0.0] if low == 0 else []
    values += [math.inf] if math.isinf(high) else []
    curves = profile_curves(b, steps, values, x)
    return curves.min(axis=0), curves.max(axis=0)
