"""The gradient noise scale B_simple = tr(Σ) / |G|², measured during training, with a confidence interval.

McCandlish et al. (2018), "An Empirical Model of Large-Batch Training",
Appendix A. ``G`` is the mean of the per-example gradients ``g_i`` over the
``N`` training examples and ``Σ = (1/N) Σ_i (g_i - G)(g_i - G)ᵀ`` their
covariance, so ``B_simple = tr(Σ) / |G|²`` is a property of the training set
at the current parameters.

**Finite population.** A batch of ``b`` examples drawn *without replacement*
from the ``N`` (an epoch's shuffle, or micro-batches of such a batch) has

    E|G_b|² = |G|² + tr(Σ) · u(b),   u(b) = (N - b) / ((N - 1) b)

(the variance of a sample mean without replacement, ``(1 - b/N) · N/(N-1) · Σ/b``);
with replacement, or an unbounded stream, ``u(b) = 1/b``. The squared norms at
two batch sizes ``b_small < b_big`` are two equations in ``|G|²`` and ``tr(Σ)``,
solved exactly for each measurement::

    tr(Σ) ≈ T = (|G_small|² - |G_big|²) / (u_small - u_big)
    |G|²  ≈ A = (u_small |G_big|² - u_big |G_small|²) / (u_small - u_big)

both unbiased. Using ``1/b`` in place of ``u(b)`` (the paper's formulas) makes
``T/A`` converge to ``tr(Σ) / (|G|² - tr(Σ)/N)`` (up to a factor N/(N-1)): too
high, and with no finite limit once ``B_simple ≳ N``. Give ``population=N``
to correct for it.

**Smoothing over examples seen.** One measurement is far too noisy to divide,
so ``B_simple`` is the ratio of the means of ``T`` and ``A`` over a *window*:
the measurements taken in the last ``window`` training examples (the loop sets
it from ``noise_scale_window`` epochs), and never fewer than the last
``min_measurements``. The window is counted in examples, not in updates, so the
lag behind the current parameters is about half the window whatever the batch
size and measurement interval.

**Confidence interval.** Fieller's interval for the ratio of the two means, with
bootstrap-t critical values from the window's measurements (heavy-tailed
per-example gradients make ``T`` skewed; :mod:`trainers.noise_interval`). It has no
upper end when ``B_simple`` reaches the window's measurable ``limit`` (the largest
value whose ``|G|²`` would be significantly positive); the reading is *above the
measurable range* only when the interval's lower end exceeds that limit (or the
window's ``|G|²`` is not positive): then ``b_simple = inf`` and the reported
metrics carry only ``b_simple_lo``, ``b_simple_limit`` and ``b_simple_above_range = 1``,
since a trial's metrics must be finite. The pairs are not quite independent
(the parameters drift within a window).

Where the two norms come from:

* the batch: a uniform sample of the training set at the current parameters,
  :func:`measurement_batch`. Not the step's own batch: within an epoch that is
  drawn from the examples not yet seen, which the model fits worse than the
  rest, so its gradient is larger than ``G`` and ``B_simple`` reads low.
* one device: :func:`grad_sq_norms_two_batch_sizes` splits a batch into
  ``n_micro`` micro-batches; ``|G_small|²`` is the mean squared norm of the
  micro-batch gradients (``b_small`` = micro-batch size) and ``|G_big|²`` the
  squared norm of their mean, the full-batch gradient (``b_big`` = batch size).
* DDP (k replicas): ``|G_small|²`` is the mean over replicas of each replica's
  local gradient norm² before the all-reduce (``b_small`` = per-replica
  batch), ``|G_big|²`` the norm² of the all-reduced gradient (``b_big`` = the
  global batch); all-reduce the local norm² (a scalar) to average it.

How the training loop uses it (the loop owns the wiring)::

    noise = NoiseScaleEstimator(population=n_train, window=n_train)  # a window of one epoch
    ...
    if step % every == 0:  # costs n_micro extra forward/backward passes
        idx = measurement_batch(n_train, batch_size, seed, step)
        noise.update(*grad_sq_norms_two_batch_sizes(model, loss_fn, x[idx], y[idx], n_micro=4), at=examples_seen)
    ...
    metrics.update(noise.estimate().metrics())  # b_simple, _lo, _hi, _limit, _above_range (finite ones)

Keep :meth:`NoiseScaleEstimator.state_dict` in the checkpoint so a resumed run
continues with the same window.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from trainers.noise_interval import fieller, ratio_interval, t_quantile

__all__ = [
    "NoiseScale",
    "NoiseScaleEstimator",
    "fieller",
    "grad_sq_norms_two_batch_sizes",
    "measurement_batch",
    "t_quantile",
]

STATE_FORMAT = 2
_MEASUREMENT_STREAM = 0x6E6F6973  # mixed into the seed of measurement_batch, apart from the trial's other streams


@dataclasses.dataclass(frozen=True)
class _Measurement:
    at: int  # training examples seen when it was taken
    g_small_sq: float
    g_big_sq: float
    b_small: int
    b_big: int


@dataclasses.dataclass(frozen=True)
class NoiseScale:
    """One reading of the estimator: ``B_simple`` and its interval over the current window.

    ``b_simple`` is NaN before two measurements; ``inf`` when the window mean of
    ``|G|²`` is not positive or the reading is above the measurable range.
    ``high`` is ``inf`` when the interval has no upper end. ``limit`` is the
    largest ``B_simple`` this window could bound (:mod:`trainers.noise_interval`).
    ``g_sq`` and ``trace_sigma`` are the window means of the unbiased estimates.
    """

    b_simple: float
    low: float
    high: float
    g_sq: float
    trace_sigma: float
    measurements: int
    confidence: float
    limit: float = math.nan

    @property
    def above_range(self) -> bool:
        """True when the whole interval lies beyond what this window can measure.

        That is: no upper end, and ``low > limit`` or a window mean of ``|G|²`` that is not positive.
        """
        return math.isinf(self.high) and (self.low > self.limit or math.isinf(self.b_simple))

    def metrics(self) -> dict[str, float]:
        """The reported metrics, all finite (a trial's metrics must be); nothing before two measurements.

        ``b_simple_lo`` always; ``b_simple`` when finite; ``b_simple_hi`` when the
        interval has an upper end; ``b_simple_limit`` (what the window can
        measure) when finite; ``b_simple_above_range`` 1 or 0. Above the
        measurable range there is no ``b_simple`` and no ``b_simple_hi``.
        """
        if math.isnan(self.b_simple):
            return {}
        values = {
            "b_simple": self.b_simple,
            "b_simple_lo": self.low,
            "b_simple_hi": self.high,
            "b_simple_limit": self.limit,
        }
        metrics = {k: v for k, v in values.items() if math.isfinite(v)}
        metrics["b_simple_above_range"] = 1.0 if self.above_range else 0.0
        return metrics


class NoiseScaleEstimator:
    """``B_simple = tr(Σ)/|G|²`` over a window of measurements, finite-population corrected, with an interval.

    ``population``: the number of training examples ``N`` batches are drawn from
    without replacement (``None``: with replacement, or an unbounded stream).
    ``window``: how many training examples back the averages reach (``None``:
    all measurements). ``confidence``: the level of the interval, in (0, 1).
    ``min_measurements`` (>= 2): the window never holds fewer, if that many were taken.
    """

    def __init__(
        self,
        population: int | None = None,
        window: int | None = None,
        confidence: float = 0.9,
        min_measurements: int = 3,
    ) -> None:
        if population is not None and (_not_int(population) or population < 2):
            raise ValueError(f"population: must be an integer >= 2 (the training examples) or None, got {population!r}")
        if window is not None and (_not_int(window) or window < 1):
            raise ValueError(f"window: must be an integer >= 1 (training examples) or None, got {window!r}")
        if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0.0 < confidence < 1.0:
            raise ValueError(f"confidence: must be a number in (0, 1) (e.g. 0.9), got {confidence!r}")
        if _not_int(min_measurements) or min_measurements < 2:
            raise ValueError(f"min_measurements: must be an integer >= 2, got {min_measurements!r}")
        self.population = population
        self.window = window
        self.confidence = float(confidence)
        self.min_measurements = min_measurements
        self._kept: deque[_Measurement] = deque()
        self._updates = 0

    def update(self, g_small_sq: float, g_big_sq: float, b_small: int, b_big: int, at: int | None = None) -> None:
        """Add one measurement: squared gradient norms at batch sizes ``b_small < b_big``.

        ``at``: training examples seen when it was taken (default: the previous
        measurement's ``at`` plus its ``b_big``, as if measured every step).
        """
        if _not_int(b_small) or b_small < 1:
            raise ValueError(f"b_small: must be an integer >= 1, got {b_small!r}")
        if _not_int(b_big) or b_big <= b_small:
            raise ValueError(f"b_big: must be an integer > b_small ({b_small}), got {b_big!r}")
        if self.population is not None and b_big > self.population:
            raise ValueError(f"b_big: must be <= population ({self.population}), got {b_big!r}")
        for name, value in (("g_small_sq", g_small_sq), ("g_big_sq", g_big_sq)):
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name}: must be a finite squared norm >= 0, got {value!r}")
        last = self._kept[-1] if self._kept else None
        if at is None:
            at = last.at + last.b_big if last else 0
        if _not_int(at) or at < 0 or (last is not None and at < last.at):
            previous = last.at if last else 0
            raise ValueError(f"at: must be an integer >= the previous measurement's ({previous}), got {at!r}")
        self._kept.append(_Measurement(int(at), float(g_small_sq), float(g_big_sq), int(b_small), int(b_big)))
        self._updates += 1
        if self.window is not None:
            while len(self._kept) > self.min_measurements and self._kept[0].at <= at - self.window:
                self._kept.popleft()

    @property
    def updates(self) -> int:
        """How many measurements have been added in all."""
        return self._updates

    @property
    def measurements(self) -> int:
        """How many measurements the window holds now."""
        return len(self._kept)

    def estimate(self) -> NoiseScale:
        """``B_simple``, its interval, the measurable limit and the window means of ``|G|²`` and ``tr(Σ)``."""
        pairs = np.array([self._unbiased(m) for m in self._kept], dtype=np.float64).reshape(-1, 2)
        n = len(pairs)
        nan = math.nan
        if n == 0:
            return NoiseScale(nan, nan, nan, nan, nan, 0, self.confidence)
        t_mean, a_mean = float(pairs[:, 0].mean()), float(pairs[:, 1].mean())
        if n < 2:
            return NoiseScale(nan, nan, nan, a_mean, t_mean, n, self.confidence)
        interval = ratio_interval(pairs[:, 0], pairs[:, 1], self.confidence)
        b_simple = math.inf if interval.above_range else interval.ratio
        return NoiseScale(b_simple, interval.low, interval.high, a_mean, t_mean, n, self.confidence, interval.limit)

    @property
    def b_simple(self) -> float:
        """:meth:`estimate`'s ``b_simple`` (NaN before two measurements, ``inf`` above the measurable range)."""
        return self.estimate().b_simple

    @property
    def g_sq(self) -> float:
        """The window mean of the unbiased ``|G|²`` estimates (NaN before the first; may be negative)."""
        return self.estimate().g_sq

    @property
    def trace_sigma(self) -> float:
        """The window mean of the unbiased ``tr(Σ)`` estimates (NaN before the first)."""
        return self.estimate().trace_sigma

    def _u(self, b: int) -> float:
        """``(E|G_b|² - |G|²) / tr(Σ)``: ``1/b``, times ``(N - b)/(N - 1)`` without replacement."""
        if self.population is None:
            return 1.0 / b
        return (self.population - b) / ((self.population - 1) * b)

    def _unbiased(self, m: _Measurement) -> tuple[float, float]:
        """``(tr(Σ), |G|²)`` estimated from one measurement."""
        u_small, u_big = self._u(m.b_small), self._u(m.b_big)
        span = u_small - u_big
        trace = (m.g_small_sq - m.g_big_sq) / span
        g_sq = (u_small * m.g_big_sq - u_big * m.g_small_sq) / span
        return trace, g_sq

    def state_dict(self) -> dict[str, Any]:
        """The measurements in the window, for a checkpoint (the settings come from the constructor)."""
        return {
            "format": STATE_FORMAT,
            "updates": self._updates,
            "measurements": [[m.at, m.g_small_sq, m.g_big_sq, m.b_small, m.b_big] for m in self._kept],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s measurements; a checkpoint of the older EMA format starts empty.

        The window is re-applied with this estimator's settings.
        """
        self._kept.clear()
        self._updates = 0
        if state.get("format") != STATE_FORMAT:
            return  # format 1 kept only per-step EMAs, which cannot be windowed or corrected
        for at, g_small_sq, g_big_sq, b_small, b_big in state["measurements"]:
            self.update(float(g_small_sq), float(g_big_sq), int(b_small), int(b_big), at=int(at))
        self._updates = int(state["updates"])


def _not_int(value: object) -> bool:
    return isinstance(value, bool) or not isinstance(value, int)


def measurement_batch(n: int, size: int, seed: int, step: int) -> torch.Tensor:
    """``size`` distinct indices of ``n`` examples, uniform, from a generator seeded by ``(seed, step)`` alone.

    A measurement must see a uniform sample of the training set *at the current
    parameters*: the step's own batch is not one (see the training loop). No
    state is carried from one draw to the next, so nothing needs checkpointing.
    """
    if _not_int(size) or not 1 <= size <= n:
        raise ValueError(f"size: must be an integer in [1, n={n}], got {size!r}")
    entropy = np.random.SeedSequence([int(seed), int(step), _MEASUREMENT_STREAM]).generate_state(1, np.uint64)[0]
    return torch.randperm(n, generator=torch.Generator().manual_seed(int(entropy)))[:size]


LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def grad_sq_norms_two_batch_sizes(
    model: nn.Module,
    loss_fn: LossFn,
    x: torch.Tensor,
    y: torch.Tensor,
    n_micro: int,
) -> tuple[float, float, int, int]:
    """``(|G_small|², |G_big|², b_small, b_big)`` from one batch, on one device.

    The batch is split into ``n_micro >= 2`` equal micro-batches of
    ``b_small = len(x) // n_micro`` examples (a remainder of fewer than
    ``n_micro`` examples is left out); ``b_big = n_micro * b_small``.
    ``|G_small|²`` is the mean over micro-batches of the squared norm of the
    micro-batch gradient, ``|G_big|²`` the squared norm of the mean of the
    micro-batch gradients (the gradient of the mean loss over the ``b_big``
    examples). ``loss_fn(model(x_micro), y_micro)`` must be the *mean* loss
    over the micro-batch, e.g. ``torch.nn.functional.cross_entropy``.

    Gradients are taken with :func:`torch.autograd.grad` over the parameters
    that require grad, so ``.grad`` is left untouched; module buffers (batch
    norm running statistics) are restored afterwards. The model's train/eval
    mode is used as it is. Costs ``n_micro`` forward and backward passes.
    """
    if isinstance(n_micro, bool) or not isinstance(n_micro, int) or n_micro < 2:
        raise ValueError(f"n_micro: must be an integer >= 2, got {n_micro!r}")
    if len(x) != len(y):
        raise ValueError(f"x and y: need the same number of examples, got {len(x)} and {len(y)}")
    b_small = len(x) // n_micro
    if b_small < 1:
        raise ValueError(f"n_micro: {n_micro} micro-batches need at least {n_micro} examples, got {len(x)}")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model: has no parameters that require grad")
    saved_buffers = [buf.detach().clone() for buf in model.buffers()]
    small_sq_sum = 0.0
    total: list[torch.Tensor] | None = None
    try:
        for i in range(n_micro):
            part = slice(i * b_small, (i + 1) * b_small)
            loss = loss_fn(model(x[part]), y[part])
            grads = torch.autograd.grad(loss, params, allow_unused=True)
            flat = [torch.zeros_like(p) if g is None else g.detach() for p, g in zip(params, grads, strict=True)]
            small_sq_sum += float(sum(g.double().pow(2).sum() for g in flat))
            total = flat if total is None else [t + g for t, g in zip(total, flat, strict=True)]
    finally:
        with torch.no_grad():
            for buf, saved in zip(model.buffers(), saved_buffers, strict=True):
                buf.copy_(saved)
    assert total is not None
    big_sq = float(sum((t.double() / n_micro).pow(2).sum() for t in total))
    return small_sq_sum / n_micro, big_sq, b_small, n_micro * b_small
