"""A bootstrap interval for the critical batch size ``B_crit`` of the McCandlish fit."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Literal

import numpy as np

from search.scaling.inputs import ScalingError, fit_points
from search.scaling.mccandlish import ScalingFit, fit_mccandlish

__all__ = ["bootstrap_b_crit"]


def _modified_residuals(fit: ScalingFit, b: np.ndarray) -> np.ndarray:
    """Log residuals over ``sqrt(1 - leverage)``, centred (Davison & Hinkley 1997, eq. 6.9)."""
    r = np.asarray(fit.residuals)
    fitted = np.asarray(fit.predict_steps(b))
    jac = np.column_stack([fit.s_min / fitted, (fit.e_min / b) / fitted])  # d log S / d log(coef)
    keep = [j for j in range(2) if np.any(jac[:, j] > 0)]
    jac = jac[:, keep]
    hat = np.einsum("ij,jk,ik->i", jac, np.linalg.pinv(jac.T @ jac), jac)
    r = r / np.sqrt(np.clip(1.0 - hat, 1e-3, None))
    return r - r.mean()


def bootstrap_b_crit(
    batch_sizes: Sequence[float],
    steps: Sequence[float],
    n_boot: int = 1000,
    *,
    seed: int | np.random.Generator,
    ci: float = 0.9,
    method: Literal["residual", "pairs"] = "residual",
) -> tuple[float, float]:
    """A percentile bootstrap interval ``(low, high)`` for ``B_crit`` at level ``ci``.

    ``method="residual"`` (default) keeps the measured batch sizes and
    resamples the fit's log residuals onto the fitted curve, each residual
    first divided by ``sqrt(1 - h_i)`` (its leverage in the log-space fit:
    the smallest and largest batch sizes pin the curve and leave small
    residuals) and then centred: the design is fixed, so every resample can
    be fitted. ``method="pairs"`` resamples the
    ``(B, S)`` points with replacement; resamples with fewer than 3 distinct
    batch sizes cannot be fitted and are drawn again.

    Resamples whose fit puts ``S_min`` at 0 count as ``B_crit = inf``, so
    ``high`` may be ``inf`` ("not bounded above by these data"). Quantiles are
    order statistics (no interpolation). ``seed`` is an int or a
    ``numpy.random.Generator``.
    """
    if isinstance(n_boot, bool) or not isinstance(n_boot, numbers.Integral) or n_boot < 10:
        raise ScalingError("n_boot", f"must be an integer >= 10, got {n_boot!r}")
    if not 0 < ci < 1:
        raise ScalingError("ci", f"must be between 0 and 1 (e.g. 0.9), got {ci!r}")
    if method not in ("residual", "pairs"):
        raise ScalingError("method", f"must be 'residual' or 'pairs', got {method!r}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    b, s = fit_points(batch_sizes, steps)
    n = len(b)
    values = np.empty(n_boot)
    if method == "residual":
        fit = fit_mccandlish(b, s)
        fitted = np.asarray(fit.predict_steps(b))
        r = _modified_residuals(fit, b)
        for k in range(n_boot):
            values[k] = fit_mccandlish(b, fitted * np.exp(rng.choice(r, size=n))).b_crit
    else:
        k, attempts = 0, 0
        while k < n_boot:
            attempts += 1
            if attempts > 100 * n_boot:
                raise ScalingError("batch_sizes", "pairs bootstrap: too few distinct batch sizes to resample")
            idx = rng.integers(0, n, size=n)
            if len(np.unique(b[idx])) < 3:
                continue
            values[k] = fit_mccandlish(b[idx], s[idx]).b_crit
            k += 1
    tail = (1 - ci) / 2
    low, high = np.quantile(values, [tail, 1 - tail], method="inverted_cdf")
    return float(low), float(high)
