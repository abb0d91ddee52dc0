"""The log-linear least-squares fit: ``log y`` on the log of every numeric parameter, the log of the width and
an indicator per label seen, with its residual spread and each prediction's own leverage.

Censored points (a running trial: its seconds so far are a lower bound on its duration) enter by expectation
maximisation of the normal regression in ``log y`` (the Tobit model): each one counts at its expected log value
given that it lies above its bound, and its residual at its expected square there, until the fit settles
(:data:`EM_ROUNDS`). Without them the fit is that of the short runs that ended first.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np

from .estimate import Basis, Estimate
from .law import LogLinearLaw
from .nearest import lognormal

__all__ = ["Fit", "fit_points", "RESIDUAL_DOF"]

#: Residual degrees of freedom a fit needs beyond its coefficients (fewer points: the nearest values instead).
RESIDUAL_DOF = 3
EM_ROUNDS = 8  # expectation-maximisation rounds with censored points (each a least-squares fit)
CLIP_Z = 30.0  # the censored points' standardised bounds are taken within +-this
MIN_SPREAD = 0.01  # the log-spread taken for the censored points' expectations where the fit has none
LABEL = "="  # a feature named "name=value" is a label's indicator (missing means 0, not the column's mean)


@dataclasses.dataclass(frozen=True)
class Fit:
    """A fitted :class:`LogLinearLaw` and what its predictions' spread needs: the inverse of ``X'X``."""

    law: LogLinearLaw
    names: tuple[str, ...]
    inverse: np.ndarray  # (p + 1) x (p + 1)
    n: int

    def row(self, feats: Mapping[str, float]) -> np.ndarray:
        centre = self.law.centre
        return np.array([1.0] + [feats.get(f, 0.0 if LABEL in f else centre.get(f, 0.0)) for f in self.names])

    def predict_many(self, configs: Sequence[Mapping[str, float]]) -> list[Estimate]:
        """:meth:`predict` for each configuration's features, in one matrix product."""
        if not configs:
            return []
        x = np.array([self.row(feats) for feats in configs])
        centres = x @ np.array([self.law.intercept] + [self.law.slopes[f] for f in self.names])
        leverage = np.maximum(0.0, np.einsum("ij,jk,ik->i", x, self.inverse, x))
        spreads = self.law.spread * np.sqrt(1.0 + leverage)
        return [lognormal(float(c), float(s), Basis.FIT, self.n, self.law.spread) for c, s in zip(centres, spreads)]

    def predict(self, feats: Mapping[str, float]) -> Estimate:
        x = self.row(feats)
        leverage = float(x @ self.inverse @ x)
        spread = self.law.spread * math.sqrt(1.0 + max(0.0, leverage))
        return lognormal(self.law.log_median(feats), spread, Basis.FIT, self.n, self.law.spread)


def _columns(points: Sequence[Mapping[str, float]]) -> tuple[list[str], dict[str, float]]:
    """The features that vary among ``points`` (numbers seen in at least half of them), and each one's mean."""
    names = sorted({f for p in points for f in p})
    kept, centre = [], {}
    for name in names:
        present = [p[name] for p in points if name in p]
        if LABEL not in name and len(present) * 2 < len(points):
            continue
        mean = sum(present) / len(present)
        values = [p.get(name, 0.0 if LABEL in name else mean) for p in points]
        if max(values) - min(values) > 1e-9:
            kept.append(name)
            if LABEL not in name:
                centre[name] = mean
    return kept, centre


def fit_points(
    points: Sequence[tuple[Mapping[str, float], float]],
    min_points: int,
    censored: Sequence[tuple[Mapping[str, float], float]] = (),
) -> Fit | None:
    """The least-squares fit of ``log value`` on the features, ``censored`` points (features, lower bound) in it
    by expectation (see the module's docstring); None with fewer than ``min_points`` or fewer than
    :data:`RESIDUAL_DOF` points beyond the coefficients, censored ones not counted."""
    usable = [(f, v) for f, v in points if v > 0]
    bounded = [(f, b) for f, b in censored if b > 0 and math.isfinite(b)]
    names, centre = _columns([f for f, _ in usable + bounded])
    n, p = len(usable), len(names)
    if n < max(min_points, p + 1 + RESIDUAL_DOF):
        return None
    rows = usable + bounded
    x = np.array([[1.0] + [f.get(name, 0.0 if LABEL in name else centre[name]) for name in names] for f, _ in rows])
    y = np.log(np.array([v for _, v in rows]))
    inverse = np.linalg.pinv(x[:n].T @ x[:n])  # (p + 1) x (p + 1): the normal equations, no SVD of x
    coef, spread = _least_squares(x[:n], y[:n], inverse, n - p - 1, np.zeros(n))  # the runs that ended first
    if bounded:
        ended = coef, spread, inverse
        inverse = np.linalg.pinv(x.T @ x)
        coef, spread = _censored(x, y, n, inverse, p, coef, spread)
        if not (np.isfinite(coef).all() and math.isfinite(spread)):  # never: the ended points' fit rather than raise
            coef, spread, inverse = ended
    law = LogLinearLaw(float(coef[0]), dict(zip(names, map(float, coef[1:]))), spread, centre)
    return Fit(law, tuple(names), inverse, len(rows))


def _least_squares(
    x: np.ndarray, y: np.ndarray, inverse: np.ndarray, dof: int, extra: np.ndarray
) -> tuple[np.ndarray, float]:
    """The coefficients and residual spread of ``y`` on ``x``, ``extra`` added to each squared residual."""
    coef = inverse @ (x.T @ y)
    residual = y - x @ coef
    return coef, math.sqrt(float(residual @ residual + extra.sum()) / max(1, dof))


def _censored(
    x: np.ndarray, y: np.ndarray, n: int, inverse: np.ndarray, p: int, coef: np.ndarray, spread: float
) -> tuple[np.ndarray, float]:
    """The fit with the rows past the ``n`` first censored at their ``y`` (log lower bounds): expectation
    maximisation from ``coef``, ``spread`` (each row's expected value and variance above its bound, refitted)."""
    from scipy.special import log_ndtr

    bounds = y[n:]
    for _ in range(EM_ROUNDS):
        s = max(spread, MIN_SPREAD)
        centre = x[n:] @ coef
        z = np.clip((bounds - centre) / s, -CLIP_Z, CLIP_Z)  # past it the hazard is z to 0.1%: no overflow
        hazard = np.exp(-0.5 * z * z - 0.5 * math.log(2 * math.pi) - log_ndtr(-z))  # pdf / survival at z
        expected = centre + s * hazard
        variance = s * s * np.maximum(0.0, 1.0 + z * hazard - hazard * hazard)
        filled = np.concatenate([y[:n], np.maximum(bounds, expected)])
        coef, spread = _least_squares(x, filled, inverse, len(y) - p - 1, np.concatenate([np.zeros(n), variance]))
    return coef, spread
