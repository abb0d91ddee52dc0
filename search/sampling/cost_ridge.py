"""A ridge fit of a trial's log cost on its parameters, for :mod:`search.sampling.cost_tpe` (``cost_model =
"ridge"``): it ranks the candidates' costs from the first few trials on.

The trial model (:class:`cluster.trial_cost.TrialCostModel`) fits least squares once it has more trials than
coefficients and falls back on the nearest configurations before: on NAS-Bench-201 (six ops of five choices, 30
label indicators) that is the first 34 trials, and the nearest configurations rank unseen cells' training times with
a Spearman correlation of 0.4-0.5 after 10 and 20 trials, the fit 0.95 after 40. A ridge penalty on the same
features (``log`` of each positive number, an indicator per label) ranks them at 0.55 and 0.85 after 10 and 20
(bench/NOTES.md, issue 52): the penalty shrinks what few trials say of a label towards the mean.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from cluster.trial_cost.law import ONE_SLOT, features, labels

__all__ = ["RidgeCost", "cost_features"]

PENALTY = 1.0  # the ridge penalty on each coefficient, in units of one trial's squared log cost


def cost_features(params: Mapping[str, Any]) -> dict[str, float]:
    """The log of each positive number among ``params`` and an indicator per label (``name=value``)."""
    out = features(params, ONE_SLOT)
    out.pop("width", None)
    out.update({f"{name}={value!r}": 1.0 for name, value in labels(params).items()})
    return out


class RidgeCost:
    """``log cost`` fitted by ridge regression on :func:`cost_features` (the numbers centred, labels 0/1, the
    mean of ``log cost`` as the intercept); :meth:`predict` answers slot-seconds (0: nothing seen yet)."""

    def __init__(self, observed: Sequence[tuple[Mapping[str, Any], float]], penalty: float = PENALTY) -> None:
        if not (math.isfinite(penalty) and penalty > 0):
            raise ValueError(f"penalty must be a number > 0, got {penalty!r}")
        points = [(cost_features(p), math.log(c)) for p, c in observed if c > 0]
        self.names = sorted({name for f, _ in points for name in f})
        self.count = len(points)
        if not points:
            self._mean, self._centre, self._coef = 0.0, np.zeros(0), np.zeros(0)
            return
        x = np.array([[f.get(name, 0.0) for name in self.names] for f, _ in points])
        y = np.array([v for _, v in points])
        self._mean = float(y.mean())
        self._centre = np.array([0.0 if "=" in n else float(x[:, i].mean()) for i, n in enumerate(self.names)])
        x = x - self._centre
        gram = x.T @ x + penalty * np.eye(len(self.names))
        self._coef = np.linalg.solve(gram, x.T @ (y - self._mean))

    def predict(self, candidates: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """Each candidate's predicted slot-seconds (the median of its lognormal; 0 where nothing is known)."""
        if not self.count:
            return np.zeros(len(candidates))
        feats = [cost_features(c) for c in candidates]
        x = (
            np.array(
                [
                    [f.get(name, self._centre[i] if "=" not in name else 0.0) for i, name in enumerate(self.names)]
                    for f in feats
                ]
            )
            - self._centre
        )
        return np.exp(self._mean + x @ self._coef)
