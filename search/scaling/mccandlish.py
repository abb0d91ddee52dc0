"""The McCandlish fit: ``S(B) = S_min (1 + B_noise/B)`` to measured steps-to-target per batch size.

McCandlish et al. 2018, "An Empirical Model of Large-Batch Training", eq. 2.11::

    S(B) = S_min (1 + B_noise / B)        steps to reach the target
    E(B) = B S(B) = E_min (1 + B / B_noise)  examples to reach the target
    E_min = S_min B_noise,   B_crit = E_min / S_min = B_noise

Written as ``S(B) = S_min + E_min / B`` the model is linear in ``1/B``, which is
how it is fitted and evaluated (so ``B_noise = inf`` and ``B_noise = 0`` stay
representable).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
from scipy import optimize

from search.scaling.inputs import fit_points

__all__ = ["ScalingFit", "fit_mccandlish", "fit_many"]


@dataclasses.dataclass(frozen=True)
class ScalingFit:
    """``S(B) = S_min (1 + B_noise/B)`` fitted to measured (B, steps-to-target).

    ``residuals`` are relative (log) residuals ``log S_measured - log S_fitted``,
    one per input point, in input order. ``b_noise`` is ``inf`` when the
    steps never level off over the measured range (``s_min == 0``) and ``0``
    when they never fall (``e_min == 0``).
    """

    s_min: float
    b_noise: float
    e_min: float
    b_crit: float
    residuals: tuple[float, ...]
    batch_sizes: tuple[float, ...]
    steps: tuple[float, ...]

    @classmethod
    def from_coefficients(
        cls,
        s_min: float,
        e_min: float,
        batch_sizes: Sequence[float] | np.ndarray = (),
        steps: Sequence[float] | np.ndarray = (),
    ) -> ScalingFit:
        """The fit with ``S(B) = s_min + e_min / B``; residuals against the given points."""
        s_min, e_min = float(s_min), float(e_min)
        b_noise = e_min / s_min if s_min > 0 else math.inf
        b = np.asarray(batch_sizes, dtype=float)
        s = np.asarray(steps, dtype=float)
        residuals = np.log(s) - np.log(s_min + e_min / b) if len(b) else np.empty(0)
        return cls(
            s_min=s_min,
            b_noise=b_noise,
            e_min=e_min,
            b_crit=b_noise,
            residuals=tuple(float(r) for r in residuals),
            batch_sizes=tuple(float(x) for x in b),
            steps=tuple(float(x) for x in s),
        )

    def predict_steps(self, batch_size: float | np.ndarray) -> float | np.ndarray:
        """``S(B) = S_min + E_min / B``: fitted steps to target at ``batch_size``."""
        result = self.s_min + self.e_min / np.asarray(batch_size, dtype=float)
        return float(result) if np.ndim(result) == 0 else result

    def predict_examples(self, batch_size: float | np.ndarray) -> float | np.ndarray:
        """``E(B) = B S(B) = E_min (1 + B / B_noise)``: fitted examples to target."""
        b = np.asarray(batch_size, dtype=float)
        result = self.s_min * b + self.e_min
        return float(result) if np.ndim(result) == 0 else result


def _fit_weighted_linear(b: np.ndarray, s: np.ndarray) -> tuple[float, float]:
    """min sum(((S_i - a - c/B_i) / S_i)^2) over a, c >= 0 (relative errors, NNLS)."""
    design = np.column_stack([1.0 / s, 1.0 / (b * s)])
    coef, _ = optimize.nnls(design, np.ones_like(s))
    return float(coef[0]), float(coef[1])


def _refine_log(b: np.ndarray, s: np.ndarray, a: float, c: float) -> tuple[float, float]:
    """min sum((log S_i - log(a + c/B_i))^2) over log a, log c, from a start inside."""
    log_s = np.log(s)

    def residuals(p: np.ndarray) -> np.ndarray:
        return np.log(np.exp(p[0]) + np.exp(p[1]) / b) - log_s

    def jacobian(p: np.ndarray) -> np.ndarray:
        a_, c_ = np.exp(p[0]), np.exp(p[1])
        fitted = a_ + c_ / b
        return np.column_stack([a_ / fitted, (c_ / b) / fitted])

    result = optimize.least_squares(residuals, np.log([a, c]), jac=jacobian, method="lm", xtol=1e-12, ftol=1e-12)
    if not result.success or not np.all(np.isfinite(result.x)):
        return a, c
    a_new, c_new = (float(v) for v in np.exp(result.x))
    if not (math.isfinite(a_new) and math.isfinite(c_new) and a_new > 0 and c_new > 0):
        return a, c
    return a_new, c_new


def fit_mccandlish(batch_sizes: Sequence[float] | np.ndarray, steps: Sequence[float] | np.ndarray) -> ScalingFit:
    """Fit ``S(B) = S_min (1 + B_noise/B)`` to best steps-to-target per batch size.

    Needs at least 3 distinct batch sizes and positive, finite steps (repeated
    batch sizes are fine: they are extra measurements); otherwise raises
    :class:`ScalingError`.

    Errors are taken as relative (steps-to-target noise is multiplicative: a
    run that needs 10% more steps at B=8 and at B=1024 is equally off):

    1. weighted linear least squares in ``1/B`` with weights ``1/S^2``,
       ``S = S_min + E_min (1/B)``, under ``S_min, E_min >= 0`` (NNLS); then
    2. when both coefficients are positive, least squares on ``log S``
       (the maximum-likelihood fit under log-normal noise), parameterised by
       ``log S_min`` and ``log E_min`` and started from step 1.

    A coefficient pinned at 0 by step 1 is kept: ``S_min = 0`` (``B_noise =
    inf``, steps still halve at the largest B) or ``E_min = 0``
    (``B_noise = 0``, steps flat over the measured range).
    """
    b, s = fit_points(batch_sizes, steps)
    a, c = _fit_weighted_linear(b, s)
    if a > 0 and c > 0:
        a, c = _refine_log(b, s, a, c)
    # a term below round-off against the measured steps is a boundary solution: make it exact
    scale = float(s.max()) * 1e-12
    a = 0.0 if a < scale else a
    c = 0.0 if c / float(b.min()) < scale else c
    return ScalingFit.from_coefficients(a, c, b, s)


def _start_many(b: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Step 1 of :func:`fit_mccandlish` without the bounds, for every row of ``s`` (2x2 normal equations)."""
    x0, x1 = 1.0 / s, 1.0 / (b * s)
    g00, g01, g11 = (x0 * x0).sum(1), (x0 * x1).sum(1), (x1 * x1).sum(1)
    h0, h1 = x0.sum(1), x1.sum(1)
    with np.errstate(all="ignore"):
        det = g00 * g11 - g01 * g01
        return (g11 * h0 - g01 * h1) / det, (g00 * h1 - g01 * h0) / det


def fit_many(
    batch_sizes: Sequence[float] | np.ndarray, steps: np.ndarray, iterations: int = 60
) -> tuple[np.ndarray, np.ndarray]:
    """``(s_min, e_min)`` of :func:`fit_mccandlish` for each row of ``steps`` (same batch sizes), vectorised.

    Rows whose weighted linear start is interior are refined together by
    Levenberg-Marquardt on ``log S`` (the same optimum as
    :func:`fit_mccandlish`, to ~1e-8); rows on a boundary, or that end near
    one, are fitted one by one with :func:`fit_mccandlish` itself. The
    bootstrap refits thousands of resamples this way.
    """
    b = np.asarray(batch_sizes, dtype=float)
    s = np.atleast_2d(np.asarray(steps, dtype=float))
    a, c = _start_many(b, s)
    interior = np.isfinite(a) & np.isfinite(c) & (a > 0) & (c > 0)
    u, v = np.log(np.where(interior, a, 1.0)), np.log(np.where(interior, c, 1.0))
    y = np.log(s)

    def cost(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        fitted = np.exp(u)[:, None] + np.exp(v)[:, None] / b
        r = np.log(fitted) - y
        return (r * r).sum(1), r, fitted

    with np.errstate(all="ignore"):
        total, r, fitted = cost(u, v)
        damping = np.full(len(s), 1e-3)
        for _ in range(iterations):
            j0, j1 = np.exp(u)[:, None] / fitted, (np.exp(v)[:, None] / b) / fitted
            g00, g01, g11 = (j0 * j0).sum(1), (j0 * j1).sum(1), (j1 * j1).sum(1)
            q0, q1 = (j0 * r).sum(1), (j1 * r).sum(1)
            m00, m11 = g00 * (1 + damping), g11 * (1 + damping)
            det = m00 * m11 - g01 * g01
            du, dv = -(m11 * q0 - g01 * q1) / det, -(m00 * q1 - g01 * q0) / det
            total_new, r_new, fitted_new = cost(u + du, v + dv)
            better = total_new <= total
            u, v = np.where(better, u + du, u), np.where(better, v + dv, v)
            total = np.where(better, total_new, total)
            r, fitted = np.where(better[:, None], r_new, r), np.where(better[:, None], fitted_new, fitted)
            damping = np.where(better, damping / 10, damping * 10)
        a, c = np.exp(u), np.exp(v)
    scale = s.max(1) * 1e-9
    good = interior & np.isfinite(a) & np.isfinite(c) & (a > scale) & (c / b.min() > scale)
    for k in np.flatnonzero(~good):
        fit = fit_mccandlish(b, s[k])
        a[k], c[k] = fit.s_min, fit.e_min
    return a, c
