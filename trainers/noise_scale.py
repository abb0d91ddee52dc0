"""The gradient noise scale B_simple = tr(Σ) / |G|², measured during training.

McCandlish et al. (2018), "An Empirical Model of Large-Batch Training",
Appendix A. A minibatch gradient of size B has ``E|G_B|² = |G|² + tr(Σ)/B``
(``G`` the true gradient, ``Σ`` the per-example gradient covariance), so the
squared norms at two batch sizes ``b_small < b_big`` give unbiased estimates::

    |G|²  ≈ (b_big |G_big|² - b_small |G_small|²) / (b_big - b_small)
    tr(Σ) ≈ (|G_small|² - |G_big|²) / (1/b_small - 1/b_big)

Each estimate is very noisy from one step, so each is smoothed over steps
(a bias-corrected exponential moving average) and only then divided. The
ratio of the smoothed values is ``B_simple``, which McCandlish et al. show
predicts the critical batch size.

Where the two norms come from:

* one device: :func:`grad_sq_norms_two_batch_sizes` splits a batch into
  ``n_micro`` micro-batches; ``|G_small|²`` is the mean squared norm of the
  micro-batch gradients (``b_small`` = micro-batch size) and ``|G_big|²`` the
  squared norm of their mean, the full-batch gradient (``b_big`` = batch size).
* DDP (k replicas): ``|G_small|²`` is the mean over replicas of each replica's
  local gradient norm² before the all-reduce (``b_small`` = per-replica
  batch), ``|G_big|²`` the norm² of the all-reduced gradient (``b_big`` = the
  global batch); all-reduce the local norm² (a scalar) to average it.

How the training loop should use it (the loop owns the wiring)::

    noise = NoiseScaleEstimator(ema=0.95)
    ...
    if step % every == 0:  # e.g. every 10 steps; costs n_micro extra backward passes
        noise.update(*grad_sq_norms_two_batch_sizes(model, loss_fn, x, y, n_micro=4))
    ...
    metrics["b_simple"] = noise.b_simple   # NaN until |G|² is estimated positive

Call it on the step's own batch before (or after) the optimizer step; it
reads the parameters and leaves ``.grad`` and the module buffers unchanged.
Keep the estimator's :meth:`NoiseScaleEstimator.state_dict` in the checkpoint
so a resumed run continues the same averages.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch
from torch import nn

__all__ = ["NoiseScaleEstimator", "grad_sq_norms_two_batch_sizes"]


class _EMA:
    """Exponential moving average with Adam-style bias correction."""

    def __init__(self, decay: float) -> None:
        self.decay = decay
        self.raw = 0.0
        self.count = 0

    def update(self, value: float) -> None:
        self.raw = self.decay * self.raw + (1.0 - self.decay) * value
        self.count += 1

    @property
    def value(self) -> float:
        if self.count == 0:
            return math.nan
        return self.raw / (1.0 - self.decay**self.count)


class NoiseScaleEstimator:
    """Smoothed unbiased estimates of ``|G|²`` and ``tr(Σ)``, and their ratio ``B_simple``.

    ``ema`` is the decay of the moving averages, in ``[0, 1)``: 0 keeps only
    the latest step; 0.95 averages over roughly the last 20 updates. The
    averages are bias-corrected, so the first updates are not pulled to 0.
    """

    def __init__(self, ema: float = 0.95) -> None:
        if isinstance(ema, bool) or not isinstance(ema, (int, float)) or not 0.0 <= ema < 1.0:
            raise ValueError(f"ema: must be a number in [0, 1) (e.g. 0.95), got {ema!r}")
        self.ema = float(ema)
        self._g_sq = _EMA(self.ema)
        self._trace = _EMA(self.ema)

    def update(self, g_small_sq: float, g_big_sq: float, b_small: int, b_big: int) -> None:
        """Add one measurement: squared gradient norms at batch sizes ``b_small < b_big``."""
        if isinstance(b_small, bool) or not isinstance(b_small, int) or b_small < 1:
            raise ValueError(f"b_small: must be an integer >= 1, got {b_small!r}")
        if isinstance(b_big, bool) or not isinstance(b_big, int) or b_big <= b_small:
            raise ValueError(f"b_big: must be an integer > b_small ({b_small}), got {b_big!r}")
        for name, value in (("g_small_sq", g_small_sq), ("g_big_sq", g_big_sq)):
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name}: must be a finite squared norm >= 0, got {value!r}")
        g_sq = (b_big * g_big_sq - b_small * g_small_sq) / (b_big - b_small)
        trace = (g_small_sq - g_big_sq) / (1.0 / b_small - 1.0 / b_big)
        self._g_sq.update(g_sq)
        self._trace.update(trace)

    @property
    def updates(self) -> int:
        """How many measurements have been added."""
        return self._g_sq.count

    @property
    def g_sq(self) -> float:
        """Smoothed estimate of ``|G|²`` (NaN before the first update; may be negative early on)."""
        return self._g_sq.value

    @property
    def trace_sigma(self) -> float:
        """Smoothed estimate of ``tr(Σ)`` (NaN before the first update)."""
        return self._trace.value

    @property
    def b_simple(self) -> float:
        """``tr(Σ) / |G|²`` from the smoothed estimates; NaN while ``|G|²`` is not estimated positive."""
        g_sq = self.g_sq
        if not g_sq > 0:
            return math.nan
        return self.trace_sigma / g_sq

    def state_dict(self) -> dict[str, float]:
        """The averages, for a checkpoint."""
        return {
            "ema": self.ema,
            "g_sq_raw": self._g_sq.raw,
            "trace_raw": self._trace.raw,
            "count": float(self._g_sq.count),
        }

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        """Restore :meth:`state_dict`'s averages (the decay must match)."""
        if float(state["ema"]) != self.ema:
            raise ValueError(f"ema: checkpoint has {state['ema']!r}, this estimator {self.ema!r}")
        count = int(state["count"])
        self._g_sq.raw, self._g_sq.count = float(state["g_sq_raw"]), count
        self._trace.raw, self._trace.count = float(state["trace_raw"]), count


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
