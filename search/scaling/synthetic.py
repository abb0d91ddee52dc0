"""Synthetic scaling sweeps with a known ``S_min`` and ``B_noise``: to check the analysis end to end.

A trial at batch size ``B`` truly reaches the target after
``s* = S_min (1 + B_noise/B) exp(sigma z)`` steps (``z`` standard normal: the
luck of its learning rate and seed). It reports once per epoch of ``n_train``
examples (``ceil(n_train/B)`` steps), its metric rising as
``1 - (1 - target) (s*/s)^power``, and stops at the first report that
reaches the target, as a sweep's trial does. The sweep's point at ``B`` is the
fewest steps to target over its trials, read by
:func:`~search.scaling.target.steps_to_target` exactly as from real reports.
The best of ``trials`` draws is biased low by the same factor at every
batch size, so the true ``B_crit`` stays ``B_noise``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from search.scaling.target import steps_to_target

__all__ = ["SyntheticScaling", "synthetic_history", "synthetic_sweep"]

METRIC = "val_accuracy"


@dataclasses.dataclass(frozen=True)
class SyntheticScaling:
    """The truth of a synthetic sweep, and how it is observed (defaults: the digits example)."""

    s_min: float = 100.0
    b_noise: float = 64.0
    n_train: int = 1438  # examples per epoch (the digits: 1,438 of 1,797 train): one report per epoch
    trials: int = 8  # trials per batch size; the sweep keeps the fastest
    sigma: float = 0.15  # per-trial log-normal spread of the true steps to target
    target: float = 0.95
    power: float = 1.0  # the metric's error falls like steps^-power
    max_epochs: int = 1000

    def steps(self, batch_size: float) -> float:
        """The true ``S(B) = S_min (1 + B_noise/B)`` of a median trial."""
        return self.s_min * (1 + self.b_noise / batch_size)


def synthetic_history(truth: SyntheticScaling, batch_size: int, s_star: float) -> list[tuple[int, dict[str, float]]]:
    """Per-epoch reports of a trial that truly reaches the target at step ``s_star``, up to the first hit."""
    per_epoch = math.ceil(truth.n_train / batch_size)
    history: list[tuple[int, dict[str, float]]] = []
    for epoch in range(1, truth.max_epochs + 1):
        steps = float(epoch * per_epoch)
        value = max(0.0, 1.0 - (1.0 - truth.target) * (s_star / steps) ** truth.power)
        value = truth.target if steps == s_star else value  # exact at the target, free of round-off
        history.append((epoch, {METRIC: value, "steps": steps, "examples": float(epoch * truth.n_train)}))
        if value >= truth.target:
            break
    return history


def synthetic_sweep(
    rng: np.random.Generator, batch_sizes: Sequence[int], truth: SyntheticScaling, *, interpolate: bool = True
) -> tuple[list[int], list[float]]:
    """``(batch sizes, fewest steps to target)`` of one seeded synthetic sweep (every size reaches it)."""
    sizes, best = [], []
    for b in batch_sizes:
        draws = truth.steps(b) * np.exp(truth.sigma * rng.standard_normal(truth.trials))
        hits = [
            steps_to_target(synthetic_history(truth, b, float(s)), METRIC, truth.target, "max", interpolate=interpolate)
            for s in draws
        ]
        steps = [h.steps for h in hits if h is not None]
        if steps:
            sizes.append(int(b))
            best.append(min(steps))
    return sizes, best
