"""The interval for ``B_simple = mean(T) / mean(A)``: Fieller's method with bootstrap-t critical values.

Each measurement gives an unbiased pair ``(T_k, A_k)`` of ``tr(Σ)`` and ``|G|²``
(:mod:`trainers.noise_scale`). ``R`` is in the interval when ``D_k(R) = T_k - R A_k``
has a mean not significantly different from 0, judged by the studentised mean
``S(R) = mean D(R) / se(D(R))`` (Fieller's pivot):

    low:  S(R) = q_hi,   high:  S(R) = q_lo

With a few heavy-tailed per-example gradients (the digits MLP after 10 epochs:
1% of the examples carry most of ``tr(Σ)``) ``T_k`` is skewed to the right, and
so is ``D_k``; the studentised mean of a right-skewed sample has a long *left*
tail (a window short of the rare large values has a small mean *and* a small
spread), so Student's symmetric ``±t`` puts the upper end too low. The
critical values here come from the bootstrap distribution of the studentised
mean of ``D(R̂)`` over the window's measurements (bootstrap-t, second-order
accurate under skewness; Hall 1988), never narrower than Student's ``t``.

What the window can measure: ``limit = mean(T) / (q_lo · se(mean A))``, the
largest ``B_simple`` whose ``|G|² = tr(Σ)/B_simple`` would be significantly
positive given the spread of this window's ``A_k``; at or above it the interval
has no upper end. ``B_simple`` is *above the measurable range* only when the
interval's lower end exceeds that limit: every value the data allow lies beyond
what this window can resolve (and when the window mean of ``|G|²`` is not even
positive, so that no finite estimate exists).
"""

from __future__ import annotations

import dataclasses
import math
import statistics

import numpy as np

__all__ = ["RatioInterval", "ratio_interval", "fieller", "t_quantile", "BOOTSTRAP_RESAMPLES", "MIN_BOOTSTRAP"]

BOOTSTRAP_RESAMPLES = 999
MIN_BOOTSTRAP = 8  # fewer measurements: Student's t on both sides (a bootstrap of so few says little)
_BOOTSTRAP_SEED = 0x6E736369  # one fixed stream: the same window always gives the same interval


@dataclasses.dataclass(frozen=True)
class RatioInterval:
    """``low <= ratio <= high`` (``high = inf``: no upper end) and the window's measurable ``limit``.

    ``ratio`` is ``mean(T)/mean(A)`` (``inf`` when ``mean(A) <= 0``).
    """

    low: float
    ratio: float
    high: float
    limit: float

    @property
    def above_range(self) -> bool:
        """The whole interval lies beyond what the window can measure (or the window's ``|G|²`` is not positive)."""
        return math.isinf(self.high) and (self.low > self.limit or math.isinf(self.ratio))


def ratio_interval(traces: np.ndarray, g_sqs: np.ndarray, confidence: float) -> RatioInterval:
    """The interval for ``mean(traces) / mean(g_sqs)`` from ``n >= 2`` paired measurements."""
    n = len(traces)
    t_mean, a_mean = float(traces.mean()), float(g_sqs.mean())
    var_t, var_a = float(traces.var(ddof=1)) / n, float(g_sqs.var(ddof=1)) / n  # variances of the means
    cov = float(((traces - t_mean) * (g_sqs - a_mean)).sum()) / (n - 1) / n
    q_low_end, q_high_end = critical_values(traces, g_sqs, confidence)
    low, _, _ = fieller(t_mean, a_mean, var_t, var_a, cov, q_low_end)
    _, _, high = fieller(t_mean, a_mean, var_t, var_a, cov, q_high_end)
    ratio = max(t_mean, 0.0) / a_mean if a_mean > 0 else math.inf
    if math.isfinite(high):
        low, high = min(low, ratio), max(high, ratio)
    se_a = math.sqrt(var_a)
    limit = max(t_mean, 0.0) / (q_high_end * se_a) if se_a > 0 else math.inf
    return RatioInterval(low, ratio, high, limit)


def critical_values(traces: np.ndarray, g_sqs: np.ndarray, confidence: float) -> tuple[float, float]:
    """``(q_hi, -q_lo)``: the studentised mean's upper and (negated) lower quantiles, each >= Student's ``t``."""
    n = len(traces)
    t = t_quantile(confidence, n - 1)
    if n < MIN_BOOTSTRAP:
        return t, t
    d = _pivot_terms(traces, g_sqs)
    rng = np.random.default_rng(_BOOTSTRAP_SEED)
    resampled = d[rng.integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))]
    spread = resampled.std(axis=1, ddof=1) / math.sqrt(n)
    keep = spread > 0
    if keep.sum() < BOOTSTRAP_RESAMPLES // 2:
        return t, t
    studentised = (resampled.mean(axis=1)[keep] - d.mean()) / spread[keep]
    alpha = 1.0 - confidence
    q_lo, q_hi = np.quantile(studentised, [alpha / 2, 1 - alpha / 2])
    return max(float(q_hi), t), max(-float(q_lo), t)


def _pivot_terms(traces: np.ndarray, g_sqs: np.ndarray) -> np.ndarray:
    """``D_k(R̂) = T_k - R̂ A_k`` at the point estimate; its limits ``T_k`` (R̂ = 0) and ``-A_k`` (R̂ = ∞)."""
    t_mean, a_mean = float(traces.mean()), float(g_sqs.mean())
    if t_mean <= 0:
        return traces
    if a_mean <= 0:
        return -g_sqs
    return traces - (t_mean / a_mean) * g_sqs


def fieller(num: float, den: float, var_num: float, var_den: float, cov: float, t: float) -> tuple[float, float, float]:
    """``(low, ratio, high)`` for ``num/den`` (both means >= 0 in truth) by Fieller's method, clipped at 0.

    The interval is ``{R >= 0 : (num - R den)² <= t² Var(num - R den)}``. When
    ``den`` is not significantly positive (``den <= t·sd(den)``) it is unbounded
    above: the ratio is reported as ``inf`` and ``low`` is the lower end.
    """
    # (num - R den)² - t² (var_num - 2 R cov + R² var_den) = a R² - 2 b R + c
    a = den * den - t * t * var_den
    b = num * den - t * t * cov
    c = num * num - t * t * var_num
    disc = max(b * b - a * c, 0.0)
    if a > 0 and den > 0:  # den significantly positive: a bounded interval around num/den
        ratio = max(num, 0.0) / den
        low = max((b - math.sqrt(disc)) / a, 0.0)
        high = max((b + math.sqrt(disc)) / a, ratio)
        return min(low, ratio), ratio, high
    if c <= 0 or (a > 0 and den <= 0):  # R = 0 is in the set, or den is significantly negative (no information)
        low = 0.0
    elif a < 0:  # roots of opposite signs; the set is R >= the positive root
        low = (b - math.sqrt(disc)) / a
    else:  # a == 0: a straight line
        low = c / (2 * b) if b > 0 else 0.0
    return low, math.inf, math.inf


def t_quantile(confidence: float, dof: int) -> float:
    """The two-sided Student-t quantile: ``P(|T_dof| <= t) = confidence``."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence: must be in (0, 1), got {confidence!r}")
    if isinstance(dof, bool) or not isinstance(dof, int) or dof < 1:
        raise ValueError(f"dof: must be an integer >= 1, got {dof!r}")
    if dof == 1:
        return math.tan(math.pi * confidence / 2)
    if dof == 2:
        p = (1 + confidence) / 2
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = statistics.NormalDist().inv_cdf((1 + confidence) / 2)
    if dof > 2000:  # Cornish-Fisher: error far below the sampling error of the spread
        return z + (z**3 + z) / (4 * dof) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)
    low, high = z, math.tan(math.pi * confidence / 2)  # the normal and Cauchy quantiles bracket it
    for _ in range(100):
        mid = (low + high) / 2
        if _t_central(mid, dof) < confidence:
            low = mid
        else:
            high = mid
        if high - low <= 1e-12 * high:
            break
    return (low + high) / 2


def _t_central(t: float, dof: int) -> float:
    """``P(|T_dof| <= t)`` in closed form (Abramowitz and Stegun 26.7.3-4)."""
    theta = math.atan(t / math.sqrt(dof))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if dof % 2 == 0:
        term, total = 1.0, 1.0
        for k in range(2, dof, 2):  # 1 + (1/2) c² + (1·3)/(2·4) c⁴ + ...
            term *= c2 * (k - 1) / k
            total += term
        return s * total
    term, total = math.cos(theta), math.cos(theta) if dof > 1 else 0.0
    for k in range(3, dof - 1, 2):  # cos θ + (2/3) cos³ θ + ...
        term *= c2 * (k - 1) / k
        total += term
    return 2 / math.pi * (theta + s * total)
