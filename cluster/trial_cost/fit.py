"""The log-linear least-squares fit: ``log y`` on the log of every numeric parameter, the log of the width and
an indicator per label seen, with its residual spread and each prediction's own leverage."""

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


def fit_points(points: Sequence[tuple[Mapping[str, float], float]], min_points: int) -> Fit | None:
    """The least-squares fit of ``log value`` on the features; None with fewer than ``min_points`` or fewer than
    :data:`RESIDUAL_DOF` points beyond the coefficients."""
    usable = [(f, v) for f, v in points if v > 0]
    names, centre = _columns([f for f, _ in usable])
    n, p = len(usable), len(names)
    if n < max(min_points, p + 1 + RESIDUAL_DOF):
        return None
    x = np.array([[1.0] + [f.get(name, 0.0 if LABEL in name else centre[name]) for name in names] for f, _ in usable])
    y = np.log(np.array([v for _, v in usable]))
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    residual = y - x @ coef
    spread = math.sqrt(float(residual @ residual) / (n - p - 1))
    law = LogLinearLaw(float(coef[0]), dict(zip(names, map(float, coef[1:]))), spread, centre)
    return Fit(law, tuple(names), np.linalg.pinv(x.T @ x), n)
