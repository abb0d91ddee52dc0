"""The learning-rate rule: ``lr ∝ B^alpha`` fitted to the best learning rate per batch size."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from scipy import stats

from search.scaling.inputs import ScalingError, positive_pairs

__all__ = ["LRRuleFit", "lr_rule_fit", "RuleVerdict"]

RuleVerdict = Literal["linear", "sqrt", "undetermined", "neither"]


@dataclasses.dataclass(frozen=True)
class LRRuleFit:
    """``lr = coefficient * B^alpha`` fitted by least squares in log-log.

    ``alpha_stderr`` is the slope's standard error (NaN with fewer than 3
    distinct batch sizes). The reference rules are anchored at the smallest
    batch size (``anchor_batch_size``, ``anchor_lr``: the geometric mean of
    the best LRs measured there).
    """

    alpha: float
    coefficient: float
    alpha_stderr: float
    batch_sizes: tuple[float, ...]
    best_lrs: tuple[float, ...]
    anchor_batch_size: float
    anchor_lr: float

    def predict(self, batch_size: float | np.ndarray) -> float | np.ndarray:
        """The fitted power law at ``batch_size``."""
        result = self.coefficient * np.asarray(batch_size, dtype=float) ** self.alpha
        return float(result) if np.ndim(result) == 0 else result

    def _rule(self, batch_size: float | np.ndarray, exponent: float) -> float | np.ndarray:
        result = self.anchor_lr * (np.asarray(batch_size, dtype=float) / self.anchor_batch_size) ** exponent
        return float(result) if np.ndim(result) == 0 else result

    def linear_rule(self, batch_size: float | np.ndarray) -> float | np.ndarray:
        """Goyal et al. (2017): ``lr ∝ B``, anchored at the smallest batch size."""
        return self._rule(batch_size, 1.0)

    def sqrt_rule(self, batch_size: float | np.ndarray) -> float | np.ndarray:
        """Square-root rule: ``lr ∝ sqrt(B)``, anchored at the smallest batch size."""
        return self._rule(batch_size, 0.5)

    @property
    def closer_rule(self) -> Literal["linear", "sqrt"]:
        """Which reference exponent (1 or 0.5) the point estimate ``alpha`` is closer to (see :meth:`verdict`)."""
        return "linear" if abs(self.alpha - 1.0) < abs(self.alpha - 0.5) else "sqrt"

    @property
    def dof(self) -> int:
        """Residual degrees of freedom of the log-log fit (points - 2)."""
        return len(self.batch_sizes) - 2

    def alpha_interval(self, ci: float = 0.9) -> tuple[float, float]:
        """The t interval ``alpha ± t_{n-2} stderr`` at level ``ci``; ``(-inf, inf)`` without a stderr."""
        if not math.isfinite(self.alpha_stderr) or self.dof < 1:
            return -math.inf, math.inf
        half = float(stats.t.ppf(0.5 + ci / 2, self.dof)) * self.alpha_stderr
        return self.alpha - half, self.alpha + half

    def verdict(self, ci: float = 0.9) -> RuleVerdict:
        """Which reference rule the ``ci`` interval of ``alpha`` admits.

        ``"linear"`` or ``"sqrt"`` when it contains exactly that exponent (1 or
        0.5), ``"undetermined"`` when it contains both (or has no finite
        width), ``"neither"`` when it contains neither.
        """
        low, high = self.alpha_interval(ci)
        linear, sqrt = low <= 1.0 <= high, low <= 0.5 <= high
        if linear and sqrt:
            return "undetermined"
        return "linear" if linear else "sqrt" if sqrt else "neither"


def lr_rule_fit(batch_sizes: Sequence[float], best_lrs: Sequence[float]) -> LRRuleFit:
    """Fit ``lr ∝ B^alpha`` to the best learning rate found at each batch size.

    Needs positive, finite values and at least 2 distinct batch sizes.
    """
    b, lr = positive_pairs(batch_sizes, best_lrs, "best_lrs")
    distinct = np.unique(b)
    if len(distinct) < 2:
        raise ScalingError("batch_sizes", f"an LR rule fit needs at least 2 distinct batch sizes, got {len(distinct)}")
    x, y = np.log(b), np.log(lr)
    design = np.column_stack([np.ones_like(x), x])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    stderr = math.nan
    if len(distinct) >= 3 and len(x) > 2:
        resid = y - design @ coef
        sigma2 = float(resid @ resid) / (len(x) - 2)
        stderr = math.sqrt(sigma2 / float(((x - x.mean()) ** 2).sum()))
    smallest = float(distinct[0])
    anchor_lr = float(np.exp(y[b == smallest].mean()))
    return LRRuleFit(
        alpha=float(coef[1]),
        coefficient=float(np.exp(coef[0])),
        alpha_stderr=stderr,
        batch_sizes=tuple(float(v) for v in b),
        best_lrs=tuple(float(v) for v in lr),
        anchor_batch_size=smallest,
        anchor_lr=anchor_lr,
    )
