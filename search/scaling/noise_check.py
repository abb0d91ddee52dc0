"""Does the measured gradient noise scale predict the fitted critical batch size? (McCandlish et al. 2018, §2.2)

McCandlish et al. found ``B_crit ≈ B_simple`` (the noise scale averaged over a
training run) within a small factor on their tasks. A sweep measures both:
``B_crit`` from the fit of the steps to target, with its interval, and
``B_simple`` in each batch size's best trial, every report from the start to
the one that reached the target. This module sets them side by side:

- each best trial's *run mean*: the mean of its finite ``b_simple`` readings
  (readings above the measurable range, and those without an estimate, are
  counted but left out), beside the means of the readings' lower and upper ends;
- the measured noise scale: the *median* of the run means, one per batch size, with a distribution-free
  interval over them (order statistics: the k-th smallest and k-th largest run means, k the largest with
  coverage at least the level, by the binomial distribution of runs below the median). The mean of the run
  means is reported beside it but not used: one batch size whose readings climb (MNIST-1D's B=16,384,
  towards 10^4) pulled it up enough to move "within 2x" (1.82 against 2.2 with the median);
- the ratio ``B_crit / B_simple``, its interval from the two intervals' ends
  (``B_crit`` low over ``B_simple`` high, and high over low), and whether it
  lies within a factor of 2 (the point ratio; the interval says whether that
  verdict is settled).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats

from search.scaling.numbers import approx

__all__ = ["RunMean", "NoisePrediction", "run_means", "noise_prediction", "median_interval", "FACTOR"]

FACTOR = 2.0  # "predicts B_crit" means within this factor either way


@dataclasses.dataclass(frozen=True)
class RunMean:
    """One best trial's ``B_simple`` averaged over its reports; ``low``/``high`` average the readings' ends."""

    batch_size: int
    mean: float
    low: float
    high: float  # inf when some reading's interval had no upper end
    readings: int  # finite readings averaged
    left_out: int  # readings above the measurable range (or with no estimate), not averaged


def _finite_or(value: float, fallback: float) -> float:
    return value if math.isfinite(value) else fallback


def run_means(histories: Mapping[int, Sequence[Sequence[float]]]) -> dict[int, RunMean]:
    """``{B: RunMean}`` from ``{B: [(step, b_simple, low, high), ...]}``; batch sizes with no finite reading omitted."""
    result = {}
    for b, points in sorted(histories.items()):
        finite = [p for p in points if math.isfinite(p[1])]
        if not finite:
            continue
        lows = [max(_finite_or(float(p[2]), 0.0), 0.0) for p in finite]
        highs = [_finite_or(float(p[3]), math.inf) if len(p) > 3 else math.inf for p in finite]
        result[int(b)] = RunMean(
            batch_size=int(b),
            mean=float(np.mean([p[1] for p in finite])),
            low=float(np.mean(lows)),
            high=float(np.mean(highs)),
            readings=len(finite),
            left_out=len(points) - len(finite),
        )
    return result


@dataclasses.dataclass(frozen=True)
class NoisePrediction:
    """The measured noise scale against the fitted ``B_crit``."""

    runs: dict[int, RunMean]
    b_simple: float  # the median of the run means
    b_simple_interval: tuple[float, float]  # order statistics of the run means (0..inf below 2 runs at 50%)
    b_crit: float
    b_crit_interval: tuple[float, float]
    ci: float
    b_simple_mean: float = math.nan  # the mean of the run means: shown, not used

    @property
    def ratio(self) -> float:
        """``B_crit / B_simple``."""
        return self.b_crit / self.b_simple if self.b_simple > 0 else math.inf

    @property
    def ratio_interval(self) -> tuple[float, float]:
        """``(B_crit low / B_simple high, B_crit high / B_simple low)``: the ratios both intervals allow."""
        (c_lo, c_hi), (s_lo, s_hi) = self.b_crit_interval, self.b_simple_interval
        low = c_lo / s_hi if s_hi > 0 else 0.0
        high = c_hi / s_lo if s_lo > 0 else math.inf
        return (low, high)

    @property
    def within(self) -> bool:
        """Whether ``B_simple`` is within a factor of 2 of ``B_crit`` (the point estimates)."""
        return 1 / FACTOR <= self.ratio <= FACTOR

    @property
    def settled(self) -> bool:
        """Whether the whole ratio interval falls on one side of "within 2x" (inside, or outside it)."""
        low, high = self.ratio_interval
        inside = 1 / FACTOR <= low and high <= FACTOR
        outside = high < 1 / FACTOR or low > FACTOR
        return inside or outside

    def _median_interval_text(self) -> str:
        low, high = self.b_simple_interval
        if math.isinf(high):
            return f"{len(self.runs)} run(s) are too few to bound the median at {self.ci:.0%}"
        return f"{self.ci:.0%} order-statistic interval over the runs {_fmt(low)}–{_fmt(high)}"

    def sentence(self) -> str:
        """The comparison in one paragraph, stating what was averaged and what was left out."""
        level = f"{self.ci:.0%}"
        runs = ", ".join(f"{approx(r.mean)} (B={b}, {r.readings} readings)" for b, r in self.runs.items())
        left = sum(r.left_out for r in self.runs.values())
        s_lo, s_hi = self.b_simple_interval
        c_lo, c_hi = self.b_crit_interval
        r_lo, r_hi = self.ratio_interval
        verdict = "within" if self.within else "not within"
        how = (
            "and the intervals settle it"
            if self.settled
            else "but the intervals leave it open (the ratio's interval crosses a factor of 2)"
        )
        return (
            f"Measured gradient noise scale B_simple, the mean over each batch size's best run up to the target: "
            f"{runs}"
            + (f" ({left} readings above the measurable range or without an estimate left out)" if left else "")
            + f"; their median {_fmt(self.b_simple)} ({self._median_interval_text()}; the median, not the mean, "
            f"{_fmt(self.b_simple_mean)}, so that one run whose readings climb does not carry the verdict). "
            f"B_crit / B_simple = {self.ratio:.2f} (from B_crit≈{_fmt(self.b_crit)}, {level} interval "
            f"{_fmt(c_lo)}–{_fmt(c_hi)}; the ratio's range {r_lo:.2f}–{_fmt_ratio(r_hi)}): the noise scale "
            f"is {verdict} a factor of {FACTOR:g} of B_crit, {how}. McCandlish et al. (2018) found "
            f"B_crit ≈ B_simple within a small factor on their tasks."
        )


_fmt = approx  # as the conclusion, the figures and the report write it


def _fmt_ratio(x: float) -> str:
    return "∞" if math.isinf(x) else f"{x:.2f}"


def median_interval(values: Sequence[float], ci: float) -> tuple[float, float]:
    """A distribution-free ``ci`` interval for the median: the j-th smallest and j-th largest of ``values``,
    j the largest with coverage P(j <= Binomial(n, 1/2) <= n - j) >= ci; (0, inf) when even the smallest and
    the largest fall short (fewer than 5 values at 90%)."""
    ordered, n = sorted(values), len(values)

    def coverage(j: int) -> float:
        return float(stats.binom.cdf(n - j, n, 0.5) - stats.binom.cdf(j - 1, n, 0.5))

    if n < 2 or coverage(1) < ci:
        return (0.0, math.inf)
    j = 1
    while j + 1 <= n - j and coverage(j + 1) >= ci:
        j += 1
    return (ordered[j - 1], ordered[n - j])


def noise_prediction(
    histories: Mapping[int, Sequence[Sequence[float]]],
    b_crit: float,
    b_crit_interval: tuple[float, float],
    ci: float = 0.9,
) -> NoisePrediction | None:
    """The comparison, or ``None`` when no run has a finite reading or ``B_crit`` is not finite and positive."""
    runs = run_means(histories)
    if not runs or not (math.isfinite(b_crit) and b_crit > 0):
        return None
    means = [r.mean for r in runs.values()]
    return NoisePrediction(
        runs=runs,
        b_simple=float(np.median(means)),
        b_simple_interval=median_interval(means, ci),
        b_simple_mean=float(np.mean(means)),
        b_crit=float(b_crit),
        b_crit_interval=(float(b_crit_interval[0]), float(b_crit_interval[1])),
        ci=ci,
    )
