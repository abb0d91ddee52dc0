"""Batch-size scaling analysis: steps-to-target, the McCandlish fit, regimes, the LR rule.

Pure analysis (numpy, scipy, pandas): no Dask, no Optuna, no torch. The
controller runs the per-batch-size searches and hands this module what the
trials reported; everything here is a function of those numbers.

The model (McCandlish et al. 2018, "An Empirical Model of Large-Batch
Training", eq. 2.11)::

    S(B) = S_min (1 + B_noise / B)        steps to reach the target
    E(B) = B S(B) = E_min (1 + B / B_noise)  examples to reach the target
    E_min = S_min B_noise,   B_crit = E_min / S_min = B_noise

Written as ``S(B) = S_min + E_min / B`` the model is linear in ``1/B``, which is
how it is fitted and evaluated (so ``B_noise = inf`` and ``B_noise = 0`` stay
representable).

The regimes (Shallue et al. 2018, "Measuring the Effects of Data Parallelism
on Neural Network Training") are read off the fitted curve through the
*doubling efficiency*::

    r(B) = 2 (1 - S(2B) / S(B))  =  1 / (1 + B / B_noise)

the fraction of the ideal halving of the steps that doubling the batch at B
still buys (1: doubling halves the steps; 0: doubling saves nothing). It is
also the data efficiency ``E_min / E(B)``. ``r >= 0.8`` (``S(2B) <= 0.6 S(B)``,
``B <= B_noise / 4``) is perfect scaling, ``r <= 0.2`` (``S(2B) >= 0.9 S(B)``,
``B >= 4 B_noise``) is maximal data parallelism, and between is diminishing
returns.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from scipy import optimize

__all__ = [
    "ScalingError",
    "TargetHit",
    "steps_to_target",
    "ScalingFit",
    "fit_mccandlish",
    "bootstrap_b_crit",
    "Regime",
    "PERFECT_EFFICIENCY",
    "MAXIMAL_EFFICIENCY",
    "scaling_efficiency",
    "regime_boundaries",
    "classify_regimes",
    "LRRuleFit",
    "lr_rule_fit",
    "conclusion",
    "validate_batch_sizes",
    "TrialOutcome",
    "scaling_table",
    "reached_points",
    "write_scaling_table",
]

PERFECT_EFFICIENCY = 0.8  # r(B) >= this: perfect scaling (S(2B) <= 0.6 S(B))
MAXIMAL_EFFICIENCY = 0.2  # r(B) <= this: maximal data parallelism (S(2B) >= 0.9 S(B))

Mode = Literal["max", "min"]


class ScalingError(ValueError):
    """A scaling-sweep input broke a rule, or the data cannot support a fit.

    ``key`` names the offending input (``"batch_sizes[2]"``); ``problem`` says
    what was wrong and what would be right.
    """

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem

    def __reduce__(self) -> tuple[type[ScalingError], tuple[str, str]]:
        return (type(self), (self.key, self.problem))


# --------------------------------------------------------------------------- steps to target


@dataclasses.dataclass(frozen=True)
class TargetHit:
    """Where one trial first reached the target.

    ``steps`` and ``examples`` are training counters (floats: interpolation may
    land between reports); ``seconds`` is wall time to the target when the
    reports carry it, else ``None``; ``report`` is the reporter's step of the
    report that reached it and ``value`` the metric there.
    """

    steps: float
    examples: float | None
    seconds: float | None
    report: int
    value: float


def _reached(value: float, target: float, mode: Mode) -> bool:
    return value >= target if mode == "max" else value <= target


def _counter(metrics: Mapping[str, float], key: str, report: int) -> float:
    if key not in metrics:
        raise ScalingError(key, f"missing from the report at step {report} (keys: {', '.join(sorted(metrics))})")
    return float(metrics[key])


def steps_to_target(
    history: Sequence[tuple[int, Mapping[str, float]]],
    metric: str,
    target: float,
    mode: Mode,
    steps_key: str = "steps",
    examples_key: str | None = "examples",
    time_key: str | None = None,
    *,
    time_is_cumulative: bool = False,
    interpolate: bool = False,
) -> TargetHit | None:
    """The first report in ``history`` whose ``metric`` reaches ``target``; ``None`` if none does.

    ``history`` is the trial's reports in order, ``(reporter step, metrics)``.
    ``mode="max"`` means reached when ``metric >= target`` (accuracy),
    ``"min"`` when ``metric <= target`` (loss). Reports without ``metric`` (or
    with a NaN) are skipped; a non-empty history in which no report carries
    ``metric`` at all raises :class:`ScalingError` (a misspelt metric would
    otherwise read as "not reached").

    ``steps_key``/``examples_key`` name cumulative counters in the reports
    (the built-in loop reports ``"steps"`` and ``"examples"``);
    ``examples_key=None`` leaves ``examples`` as ``None``. ``time_key`` names a
    wall-time metric: per-report durations summed up to the hit (the loop's
    ``"epoch_seconds"``), or a running clock with ``time_is_cumulative=True``.

    By default the hit is the report itself: steps are counted at report
    granularity (an upper bound, conservative by at most one report interval).
    ``interpolate=True`` instead interpolates steps, examples and seconds
    linearly in the metric between the previous report that carried it and
    the hit (no interpolation for a hit at the first such report).
    """
    if mode not in ("max", "min"):
        raise ScalingError("mode", f"must be 'max' or 'min', got {mode!r}")
    target = float(target)
    if not math.isfinite(target):
        raise ScalingError("target", f"must be a finite number, got {target!r}")
    elapsed = 0.0
    previous: tuple[float, float, float | None, float | None] | None = None  # value, steps, examples, seconds
    seen_metric = False
    for report, metrics in history:
        if time_key is not None and time_key in metrics:
            elapsed = float(metrics[time_key]) if time_is_cumulative else elapsed + float(metrics[time_key])
        if metric not in metrics or not math.isfinite(float(metrics[metric])):
            continue
        seen_metric = True
        value = float(metrics[metric])
        steps = _counter(metrics, steps_key, report)
        examples = _counter(metrics, examples_key, report) if examples_key is not None else None
        seconds = elapsed if time_key is not None else None
        if _reached(value, target, mode):
            if interpolate and previous is not None and value != previous[0]:
                f = (target - previous[0]) / (value - previous[0])

                def lerp(a: float | None, b: float | None) -> float | None:
                    return None if a is None or b is None else a + f * (b - a)

                steps = lerp(previous[1], steps)  # type: ignore[assignment]
                examples = lerp(previous[2], examples)
                seconds = lerp(previous[3], seconds)
            return TargetHit(steps=float(steps), examples=examples, seconds=seconds, report=int(report), value=value)
        previous = (value, steps, examples, seconds)
    if history and not seen_metric:
        keys = sorted({k for _, m in history for k in m})
        raise ScalingError("metric", f"{metric!r} never appears in the reports (reported: {', '.join(keys)})")
    return None


# --------------------------------------------------------------------------- the McCandlish fit


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
        cls, s_min: float, e_min: float, batch_sizes: Sequence[float] = (), steps: Sequence[float] = ()
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


def _positive_pairs(
    batch_sizes: Sequence[float], values: Sequence[float], name: str, hint: str = ""
) -> tuple[np.ndarray, np.ndarray]:
    """One finite value > 0 per batch size (itself finite and > 0), as float arrays."""
    b = np.asarray(batch_sizes, dtype=float)
    v = np.asarray(values, dtype=float)
    if b.ndim != 1 or v.shape != b.shape:
        raise ScalingError(name, f"need one value per batch size, got {len(v)} for {len(b)} batch sizes")
    for label, column in (("batch_sizes", b), (name, v)):
        bad = np.flatnonzero(~(np.isfinite(column) & (column > 0)))
        if len(bad):
            i = int(bad[0])
            raise ScalingError(f"{label}[{i}]", f"must be a finite number > 0, got {column[i]!r}{hint}")
    return b, v


def _check_points(batch_sizes: Sequence[float], steps: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    b, s = _positive_pairs(batch_sizes, steps, "steps", " (leave out batch sizes that did not reach the target)")
    distinct = np.unique(b)
    if len(distinct) < 3:
        raise ScalingError(
            "batch_sizes",
            f"a fit of S(B) = S_min (1 + B_noise/B) needs at least 3 distinct batch sizes "
            f"that reached the target, got {len(distinct)} ({', '.join(f'{x:g}' for x in distinct)})",
        )
    return b, s


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


def fit_mccandlish(batch_sizes: Sequence[float], steps: Sequence[float]) -> ScalingFit:
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
    b, s = _check_points(batch_sizes, steps)
    a, c = _fit_weighted_linear(b, s)
    if a > 0 and c > 0:
        a, c = _refine_log(b, s, a, c)
    # a term below round-off against the measured steps is a boundary solution: make it exact
    scale = float(s.max()) * 1e-12
    a = 0.0 if a < scale else a
    c = 0.0 if c / float(b.min()) < scale else c
    return ScalingFit.from_coefficients(a, c, b, s)


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
    b, s = _check_points(batch_sizes, steps)
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


# --------------------------------------------------------------------------- regimes


class Regime(enum.Enum):
    """Shallue et al. (2018)'s three regimes of steps-to-target against batch size."""

    PERFECT_SCALING = "perfect scaling"
    DIMINISHING_RETURNS = "diminishing returns"
    MAXIMAL_DATA_PARALLELISM = "maximal data parallelism"


def _check_thresholds(perfect: float, maximal: float) -> None:
    if not 0 < maximal < perfect < 1:
        raise ScalingError(
            "thresholds", f"need 0 < maximal < perfect < 1, got perfect={perfect!r}, maximal={maximal!r}"
        )


def scaling_efficiency(fit: ScalingFit, batch_size: float | np.ndarray) -> float | np.ndarray:
    """Doubling efficiency ``r(B) = 2 (1 - S(2B)/S(B))`` on the fitted curve (= ``1/(1 + B/B_noise)``)."""
    b = np.asarray(batch_size, dtype=float)
    result = 2.0 * (1.0 - np.asarray(fit.predict_steps(2 * b)) / np.asarray(fit.predict_steps(b)))
    return float(result) if np.ndim(result) == 0 else result


def regime_boundaries(
    fit: ScalingFit, perfect: float = PERFECT_EFFICIENCY, maximal: float = MAXIMAL_EFFICIENCY
) -> tuple[float, float]:
    """``(B_perfect, B_maximal)``: perfect scaling for ``B <= B_perfect``, maximal data parallelism for ``B >= B_maximal``.

    ``r(B) >= p  <=>  B <= B_noise (1/p - 1)``; with the default thresholds
    ``B_noise / 4`` and ``4 B_noise``.
    """
    _check_thresholds(perfect, maximal)
    return fit.b_noise * (1 / perfect - 1), fit.b_noise * (1 / maximal - 1)


def classify_regimes(
    fit: ScalingFit,
    batch_sizes: Iterable[int],
    *,
    perfect: float = PERFECT_EFFICIENCY,
    maximal: float = MAXIMAL_EFFICIENCY,
) -> dict[int, Regime]:
    """Each batch size's regime on the fitted curve, by its doubling efficiency ``r(B)``.

    ``r >= perfect`` (default 0.8: doubling cuts the steps to at most 0.6x):
    perfect scaling; ``r <= maximal`` (default 0.2: doubling still leaves at
    least 0.9x the steps): maximal data parallelism; otherwise diminishing
    returns.
    """
    _check_thresholds(perfect, maximal)
    regimes: dict[int, Regime] = {}
    for b in batch_sizes:
        r = scaling_efficiency(fit, b)
        if r >= perfect:
            regimes[b] = Regime.PERFECT_SCALING
        elif r <= maximal:
            regimes[b] = Regime.MAXIMAL_DATA_PARALLELISM
        else:
            regimes[b] = Regime.DIMINISHING_RETURNS
    return regimes


# --------------------------------------------------------------------------- the learning-rate rule


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
        """Which reference exponent (1 or 0.5) the fitted ``alpha`` is closer to."""
        return "linear" if abs(self.alpha - 1.0) < abs(self.alpha - 0.5) else "sqrt"


def lr_rule_fit(batch_sizes: Sequence[float], best_lrs: Sequence[float]) -> LRRuleFit:
    """Fit ``lr ∝ B^alpha`` to the best learning rate found at each batch size.

    Needs positive, finite values and at least 2 distinct batch sizes.
    """
    b, lr = _positive_pairs(batch_sizes, best_lrs, "best_lrs")
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


# --------------------------------------------------------------------------- the conclusion


def _num(x: float) -> str:
    """A batch size or count for prose: 3 significant figures, thousands separated."""
    if not math.isfinite(x):
        return "∞"
    if x >= 10:
        return f"{float(f'{x:.3g}'):,.0f}"
    return f"{x:.3g}" if x >= 1 else f"{x:.2g}"


def _listed(values: Sequence[int]) -> str:
    names = [str(v) for v in values]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def conclusion(
    fit: ScalingFit,
    regimes: Mapping[int, Regime],
    lr_fit: LRRuleFit | None = None,
    *,
    b_crit_interval: tuple[float, float] | None = None,
    ci: float = 0.9,
    not_reached: Sequence[int] = (),
    perfect: float = PERFECT_EFFICIENCY,
    maximal: float = MAXIMAL_EFFICIENCY,
) -> str:
    """One plain-language paragraph: where doubling pays, where it stops, B_crit, the LR exponent."""
    b_perfect, b_maximal = regime_boundaries(fit, perfect, maximal)
    halve = f"{1 - perfect / 2:.1f}"  # S(2B)/S(B) at the perfect threshold
    saves = f"{maximal / 2:.0%}"  # step saving from doubling at the maximal threshold
    parts: list[str] = []
    if math.isinf(fit.b_noise):
        parts.append(
            "Doubling the batch halved the steps to target at every batch size measured: "
            "the critical batch size lies beyond the largest one tried."
        )
    elif fit.b_noise == 0:
        parts.append(
            "A larger batch never reduced the steps to target: every batch size measured "
            "was already at maximal data parallelism."
        )
    else:
        parts.append(
            f"Up to B≈{_num(b_perfect)}, doubling the batch nearly halves the steps to target "
            f"(to {halve}x or fewer); beyond B≈{_num(b_maximal)} it stops paying "
            f"(doubling saves less than {saves} of the steps)."
        )
        interval = ""
        if b_crit_interval is not None:
            interval = f", {ci:.0%} bootstrap interval {_num(b_crit_interval[0])}–{_num(b_crit_interval[1])}"
        parts.append(
            f"The critical batch size is B_crit≈{_num(fit.b_crit)}{interval}: there the run needs "
            f"2x the minimum steps (S_min≈{_num(fit.s_min)}) and 2x the minimum examples "
            f"(E_min≈{_num(fit.e_min)})."
        )
    by_regime = {r: sorted(b for b, rr in regimes.items() if rr is r) for r in Regime}
    measured = [f"{_listed(bs)} {'is' if len(bs) == 1 else 'are'} in {r.value}" for r, bs in by_regime.items() if bs]
    if measured:
        parts.append("Of the batch sizes measured, " + "; ".join(measured) + ".")
    if not_reached:
        parts.append(f"No trial reached the target at B={_listed(sorted(not_reached))}.")
    if lr_fit is not None:
        stderr = f" ± {lr_fit.alpha_stderr:.2f}" if math.isfinite(lr_fit.alpha_stderr) else ""
        rule = "linear rule (B^1)" if lr_fit.closer_rule == "linear" else "square-root rule (B^0.5)"
        parts.append(f"The best learning rate grew like B^{lr_fit.alpha:.2f}{stderr}, closer to the {rule}.")
    return " ".join(parts)


# --------------------------------------------------------------------------- input checks


def validate_batch_sizes(values: object, *, key: str = "batch_sizes") -> tuple[int, ...]:
    """The batch sizes of a sweep as builtin ints, sorted ascending.

    Each must be an integer (not a bool, not a float such as ``8.0``) ``>= 1``,
    each may appear once, and a fit needs at least 3. Otherwise raises
    :class:`ScalingError` naming the value and the rule.
    """
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ScalingError(key, f"must be a list of positive integers, got {values!r}")
    seen: dict[int, int] = {}
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise ScalingError(f"{key}[{i}]", f"must be a positive integer, got {v!r} ({type(v).__name__})")
        if v < 1:
            raise ScalingError(f"{key}[{i}]", f"must be a positive integer (>= 1), got {v!r}")
        if int(v) in seen:
            raise ScalingError(
                f"{key}[{i}]", f"{int(v)} already appears at {key}[{seen[int(v)]}]; list each batch size once"
            )
        seen[int(v)] = i
    if len(seen) < 3:
        raise ScalingError(
            key, f"a scaling fit needs at least 3 batch sizes, got {len(seen)} ({list(seen)}); e.g. [8, 16, 32, 64]"
        )
    return tuple(sorted(seen))


# --------------------------------------------------------------------------- the table


@dataclasses.dataclass(frozen=True)
class TrialOutcome:
    """One finished trial of the sweep: its batch size, learning rate and target hit (``None``: not reached)."""

    batch_size: int
    lr: float | None
    hit: TargetHit | None
    trial: int | None = None


TABLE_COLUMNS = (
    "batch_size",
    "status",
    "trials",
    "trials_reached",
    "best_trial",
    "steps_to_target",
    "examples_to_target",
    "wall_seconds",
    "best_lr",
    "regime",
    "fitted_steps",
    "efficiency",
)


def _best(outcomes: Sequence[TrialOutcome]) -> TrialOutcome | None:
    hits = [o for o in outcomes if o.hit is not None]
    if not hits:
        return None
    return min(hits, key=lambda o: (o.hit.steps, o.hit.seconds if o.hit.seconds is not None else math.inf))  # type: ignore[union-attr]


def scaling_table(
    outcomes: Iterable[TrialOutcome],
    batch_sizes: Iterable[int],
    *,
    fit: ScalingFit | None = None,
    regimes: Mapping[int, Regime] | None = None,
) -> pd.DataFrame:
    """One row per batch size of the sweep, in ascending order; none is dropped.

    The best trial at a batch size is the one with the fewest steps to target
    (ties: least wall time). ``status`` is ``"reached"``, ``"not reached"``
    (trials ran, none reached the target: the target columns are NaN) or
    ``"no trials"``. ``examples_to_target`` falls back to ``steps * B`` when
    the reports carried no examples counter. ``regime`` (from ``regimes``) is
    filled for reached rows only; ``fitted_steps`` and ``efficiency`` (the
    doubling efficiency r(B)) come from ``fit`` when given.
    """
    by_b: dict[int, list[TrialOutcome]] = {int(b): [] for b in batch_sizes}
    for o in outcomes:
        by_b.setdefault(int(o.batch_size), []).append(o)
    rows = []
    for b in sorted(by_b):
        trials = by_b[b]
        best = _best(trials)
        hit = best.hit if best is not None else None
        row: dict[str, object] = {
            "batch_size": b,
            "status": "reached" if hit is not None else ("not reached" if trials else "no trials"),
            "trials": len(trials),
            "trials_reached": sum(o.hit is not None for o in trials),
            "best_trial": best.trial if best is not None and best.trial is not None else pd.NA,
            "steps_to_target": hit.steps if hit else math.nan,
            "examples_to_target": (hit.examples if hit.examples is not None else hit.steps * b) if hit else math.nan,
            "wall_seconds": hit.seconds if hit and hit.seconds is not None else math.nan,
            "best_lr": best.lr if best is not None and best.lr is not None else math.nan,
            "regime": regimes[b].value if hit is not None and regimes and b in regimes else "",
            "fitted_steps": fit.predict_steps(b) if fit is not None else math.nan,
            "efficiency": scaling_efficiency(fit, b) if fit is not None else math.nan,
        }
        rows.append(row)
    table = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    table["best_trial"] = table["best_trial"].astype("Int64")
    return table


def reached_points(table: pd.DataFrame, column: str = "steps_to_target") -> tuple[list[int], list[float]]:
    """``(batch sizes, values)`` of the rows that reached the target: the fit's input."""
    rows = table[table["status"] == "reached"]
    return [int(b) for b in rows["batch_size"]], [float(v) for v in rows[column]]


def write_scaling_table(table: pd.DataFrame, path: str | Path) -> Path:
    """Write ``table`` as CSV (NaN as empty cells; the ``status`` column names unreached rows)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, index=False, na_rep="")
    return path
