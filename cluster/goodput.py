"""Goodput of a data-parallel trial at a width: throughput (examples/s) x statistical efficiency.

Throughput comes from a step-time model fitted to what the trial measured (Pollux/AdaptDL's form, simplified)::

    T(w, m) = alpha_c + beta_c m + comm(w)        m: the per-replica batch, w: the width
    comm(1) = 0,  comm(w) = alpha_n + beta_n (w - 2)   for w >= 2 (ring all-reduce: a constant, a retrogression)
    throughput(w) = B(w) / T(w, B(w) / w)

Where a part cannot be identified from the measurements the prior is optimistic in the direction a trial is
tried (as AdaptDL's is): no width above 1 seen -> no communication cost; no width above 2 -> ``beta_n = 0``; one
per-replica batch seen -> ``alpha_c = 0`` (compute in proportion to the per-replica batch). AdaptDL fixes
``alpha_c`` at half the step there instead, which is optimistic for its case, a per-replica batch that grows;
here a fixed global batch's per-replica share shrinks as the trial widens, and half the step fixed would
forbid a 2 -> 4 resize before it was ever measured (speedup 1.2 for 2 more slots). The wider run, once
measured, corrects the prior.
Unlike AdaptDL there is one kind of link (no intra/inter-node split) and no compute/network overlap (its
``gamma = 1``): the fit is a non-negative linear least squares on step times, not a bounded log-space optimisation.

Statistical efficiency at a global batch ``B`` of a trial tuned at ``B0`` with gradient noise scale ``B_noise``
(McCandlish et al.; Pollux's ``gain / scale``) is ``(B_noise + B0) / (B_noise + B)``: 1 at ``B0``, and the
fraction of each example's progress kept at a larger batch. AdaScale's gain for a scale ``S = B / B0`` is
``r = (B_noise/B0 + 1) / (B_noise/(S B0) + 1)`` (the issue's ``(s + |g|^2)/(s/S + |g|^2)`` with ``s/|g|^2 =
B_noise/B0``): the learning rate is multiplied by ``r``, and efficiency = ``r / S``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

__all__ = ["StepTime", "StepModel", "fit_step_model", "efficiency", "adascale_gain", "Goodput"]


@dataclasses.dataclass(frozen=True)
class StepTime:
    """One measurement: seconds per optimiser step at ``width`` replicas with ``local_batch`` examples each."""

    width: int
    local_batch: float
    seconds: float

    def __post_init__(self) -> None:
        if self.width < 1:
            raise ValueError(f"step time width={self.width!r}: must be >= 1")
        if not self.local_batch > 0:
            raise ValueError(f"step time local_batch={self.local_batch!r}: must be > 0")
        if not (self.seconds > 0 and math.isfinite(self.seconds)):
            raise ValueError(f"step time seconds={self.seconds!r}: must be a finite number > 0")

    @classmethod
    def from_throughput(cls, width: int, global_batch: float, examples_per_second: float) -> StepTime:
        """The step time of a run that trained ``examples_per_second`` at ``global_batch`` on ``width`` replicas."""
        if not examples_per_second > 0:
            raise ValueError(f"throughput {examples_per_second!r} examples/s: must be > 0")
        return cls(width, global_batch / width, global_batch / examples_per_second)


@dataclasses.dataclass(frozen=True)
class StepModel:
    """``T(w, m) = alpha_c + beta_c m + [w > 1] (alpha_n + beta_n (w - 2))``, all terms >= 0 (see the module)."""

    alpha_c: float
    beta_c: float
    alpha_n: float = 0.0
    beta_n: float = 0.0

    def step_seconds(self, width: int, local_batch: float) -> float:
        comm = 0.0 if width == 1 else self.alpha_n + self.beta_n * (width - 2)
        return self.alpha_c + self.beta_c * local_batch + comm

    def throughput(self, width: int, global_batch: float) -> float:
        """Examples per second at ``width`` replicas sharing ``global_batch``."""
        return global_batch / self.step_seconds(width, global_batch / width)


def _nnls(design: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0 (columns whose coefficient goes negative dropped, refitted)."""
    active = list(range(design.shape[1]))
    coef = np.zeros(design.shape[1])
    while active:
        solution, *_ = np.linalg.lstsq(design[:, active], target, rcond=None)
        if (solution >= 0).all():
            coef[active] = solution
            break
        active = [a for a, s in zip(active, solution, strict=True) if s >= 0]
    return coef


def fit_step_model(measured: Sequence[StepTime], fixed_share: float = 0.0) -> StepModel:
    """The :class:`StepModel` fitted to ``measured`` (at least one), with AdaptDL's priors for what they cannot show;
    ``fixed_share``: the share of the step taken as fixed (``alpha_c``) where one per-replica batch is measured: 0
    (optimistic, the default) or AdaptDL's own 0.5 (where trying a width costs others their slots)."""
    if not measured:
        raise ValueError("a step-time fit needs at least one measurement")
    widths = np.array([m.width for m in measured], dtype=float)
    local = np.array([m.local_batch for m in measured], dtype=float)
    seconds = np.array([m.seconds for m in measured], dtype=float)
    wide = (widths > 1).astype(float)
    columns = {"alpha_c": np.ones_like(local), "beta_c": local, "alpha_n": wide, "beta_n": wide * (widths - 2)}
    fixed: dict[str, float] = {}
    if not (widths > 1).any():
        fixed.update(alpha_n=0.0, beta_n=0.0)
    if not (widths > 2).any():
        fixed["beta_n"] = 0.0
    if len(set(local.tolist())) == 1:  # 0: optimistic in the direction tried: a replica's share costs in proportion
        fixed["alpha_c"] = fixed_share * float(
            np.median(seconds - sum(fixed.get(n, 0.0) * columns[n] for n in ("alpha_n", "beta_n")))
        )
    free = [name for name in columns if name not in fixed]
    target = seconds - sum(value * columns[name] for name, value in fixed.items())
    coef = _nnls(np.column_stack([columns[name] for name in free]), target) if free else np.zeros(0)
    values = {**fixed, **{name: float(c) for name, c in zip(free, coef, strict=True)}}
    return StepModel(**values)


def efficiency(batch: float, base_batch: float, b_noise: float) -> float:
    """Statistical efficiency of ``batch`` relative to ``base_batch``: ``(B_noise + B0) / (B_noise + B)``.

    ``b_noise = inf`` (noise dominates: any batch is as good per example) gives 1."""
    if not (batch > 0 and base_batch > 0):
        raise ValueError(f"efficiency of batch={batch!r} at base_batch={base_batch!r}: both must be > 0")
    if not b_noise >= 0:
        raise ValueError(f"b_noise={b_noise!r}: must be >= 0 (inf allowed)")
    if math.isinf(b_noise):
        return 1.0
    return (b_noise + base_batch) / (b_noise + batch)


def adascale_gain(scale: float, base_batch: float, b_noise: float) -> float:
    """AdaScale's gain ``r`` for a global batch ``scale`` times ``base_batch`` (1 <= r <= scale)."""
    if not scale > 0:
        raise ValueError(f"adascale scale={scale!r}: must be > 0")
    return scale * efficiency(scale * base_batch, base_batch, b_noise)


@dataclasses.dataclass(frozen=True)
class Goodput:
    """A trial's goodput per width: its step model, its batch rule and its noise scale.

    ``grow``: the per-replica batch stays what it was at ``base_width`` (the global batch grows with the width);
    else the global batch stays ``base_batch`` and each replica's share shrinks. ``b_noise`` None: not measured,
    taken as ``base_batch`` (efficiency 2/3 at twice the batch: neither optimistic nor hopeless)."""

    model: StepModel
    base_batch: float
    base_width: int = 1
    grow: bool = False
    b_noise: float | None = None

    def batch(self, width: int) -> float:
        return self.base_batch * width / self.base_width if self.grow else self.base_batch

    def efficiency(self, width: int) -> float:
        noise = self.base_batch if self.b_noise is None else self.b_noise
        return efficiency(self.batch(width), self.base_batch, noise)

    def __call__(self, width: int) -> float:
        """Examples/s that count: throughput x efficiency at ``width``."""
        return self.model.throughput(width, self.batch(width)) * self.efficiency(width)
