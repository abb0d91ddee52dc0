"""The critical batch size over training, measured directly: the branching study's plan and its rules.

After Merrill et al., "Critical Batch Size Revisited" (AI2, 2025): one reference run at a small batch
checkpoints at several points; from each point, short branches at several batch sizes (each over a small
grid of learning rates around the reference's, scaled to the branch's batch by a rule) train the same
number of examples; the critical batch size at that point is the largest batch whose best branch ends
within ``epsilon`` (relative) of the best loss any batch reached there. A batch-size schedule follows:
from each point on, train at the critical batch size measured there (never smaller than before: a warm-up).

This module holds the plain parts (the study's settings, validated at construction, and the rules);
:mod:`search.scaling.branch_run` runs the trials.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from spaces.batch import LRScaling

__all__ = ["BranchingSpec", "Branch", "best_per_batch", "at_grid_edge", "widening", "critical_batch", "batch_schedule"]


@dataclasses.dataclass(frozen=True)
class BranchingSpec:
    """What a branching study measures.

    ``points``: the reference run's epochs to branch from (increasing, >= 1); ``batch_sizes``: the branches'
    global batch sizes (distinct, >= 1; the reference's batch is ``reference_batch``); ``lr_factors``: the
    grid each branch's learning rate takes around the reference rate scaled to its batch by ``lr_rule``
    (``spaces.batch.LRScaling``: none, linear, sqrt); ``branch_epochs``: how long each branch trains (equal
    examples for every batch); ``epsilon``: the relative loss tolerance of the critical-batch rule;
    ``epochs``: the reference run's (and the scheduled run's) length; ``widen``: how many rounds may add a
    rate one step beyond a batch's tuned rate when it is at an end of the rates it tried (0: none).
    """

    points: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    reference_batch: int
    epochs: int
    branch_epochs: int = 1
    lr_factors: tuple[float, ...] = (0.5, 1.0, 2.0)
    lr_rule: str = "linear"
    epsilon: float = 0.01
    widen: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "points", tuple(self.points))
        object.__setattr__(self, "batch_sizes", tuple(sorted(self.batch_sizes)))
        object.__setattr__(self, "lr_factors", tuple(float(f) for f in self.lr_factors))
        if not self.points or any(not isinstance(p, int) or p < 1 for p in self.points):
            raise ValueError(f"branching points={self.points!r}: must be a non-empty list of epochs >= 1")
        if list(self.points) != sorted(set(self.points)):
            raise ValueError(f"branching points={self.points!r}: must be strictly increasing")
        if not isinstance(self.epochs, int) or self.epochs <= self.points[-1]:
            raise ValueError(f"branching epochs={self.epochs!r}: must be an int > the last point {self.points[-1]}")
        sizes = self.batch_sizes
        if not sizes or any(not isinstance(b, int) or b < 1 for b in sizes) or len(set(sizes)) != len(sizes):
            raise ValueError(f"branching batch_sizes={sizes!r}: must be distinct ints >= 1")
        if self.reference_batch not in sizes or self.reference_batch != sizes[0]:
            raise ValueError(
                f"branching reference_batch={self.reference_batch!r}: must be the smallest of batch_sizes {sizes}"
            )
        if not isinstance(self.branch_epochs, int) or self.branch_epochs < 1:
            raise ValueError(f"branching branch_epochs={self.branch_epochs!r}: must be an int >= 1")
        if not self.lr_factors or any(not (f > 0 and math.isfinite(f)) for f in self.lr_factors):
            raise ValueError(f"branching lr_factors={self.lr_factors!r}: must be a non-empty list of numbers > 0")
        LRScaling(self.lr_rule, self.reference_batch)  # names the rule and its choices when it is not one
        if not isinstance(self.widen, int) or isinstance(self.widen, bool) or self.widen < 0:
            raise ValueError(f"branching widen={self.widen!r}: must be an int >= 0 (rounds)")
        if not 0 <= self.epsilon < 1:
            raise ValueError(f"branching epsilon={self.epsilon!r}: must be in [0, 1)")

    def branch_lr(self, reference_lr: float, batch_size: int, factor: float) -> float:
        """The learning rate a branch at ``batch_size`` takes: the reference's scaled by the rule, times ``factor``."""
        return factor * LRScaling(self.lr_rule, self.reference_batch)(reference_lr, batch_size)


@dataclasses.dataclass(frozen=True)
class Branch:
    """One branch's outcome: where it started, its batch and rate, its loss and accuracy after equal examples."""

    point: int
    batch_size: int
    factor: float
    lr: float
    val_loss: float
    val_accuracy: float


def best_per_batch(branches: Sequence[Branch], point: int) -> dict[int, Branch]:
    """Each batch size's best branch (lowest finite ``val_loss``) from ``point``: its tuned rate."""
    best: dict[int, Branch] = {}
    for b in branches:
        if b.point != point or not math.isfinite(b.val_loss):
            continue
        if b.batch_size not in best or b.val_loss < best[b.batch_size].val_loss:
            best[b.batch_size] = b
    return best


def _edge_steps(branches: Sequence[Branch], point: int) -> dict[int, float]:
    """Each batch size at ``point`` whose tuned rate is at an end of the factors it tried: the next factor
    out (half the lowest, twice the highest). One factor tried: nothing to bracket."""
    out: dict[int, float] = {}
    for b, x in best_per_batch(branches, point).items():
        tried = {y.factor for y in branches if y.point == point and y.batch_size == b}
        if len(tried) > 1 and x.factor == min(tried):
            out[b] = x.factor / 2
        elif len(tried) > 1 and x.factor == max(tried):
            out[b] = x.factor * 2
    return out


def at_grid_edge(branches: Sequence[Branch], point: int) -> list[int]:
    """The batch sizes whose tuned rate at ``point`` is at an end of their grid (not bracketed)."""
    return sorted(_edge_steps(branches, point))


def widening(branches: Sequence[Branch], points: Sequence[int]) -> list[tuple[int, int, float]]:
    """``(point, batch, factor)`` to try next: one step beyond each tuned rate at an end of its grid."""
    return [(p, b, f) for p in points for b, f in sorted(_edge_steps(branches, p).items())]


def critical_batch(losses: Mapping[int, float], epsilon: float) -> int:
    """The largest batch size whose loss is within ``epsilon`` (relative) of the lowest loss of any batch size.

    ``losses`` maps each batch size to its (tuned) loss after equal examples; non-finite losses (a diverged
    branch) never qualify.
    """
    finite = {b: v for b, v in losses.items() if math.isfinite(v)}
    if not finite:
        raise ValueError("critical_batch: no batch size has a finite loss")
    best = min(finite.values())
    return max(b for b, v in finite.items() if v <= best + epsilon * abs(best))


def batch_schedule(points: Sequence[int], critical: Sequence[int], start: int) -> list[tuple[int, int]]:
    """``(from epoch, batch)`` pairs: ``start`` from epoch 0, then at each point the critical batch measured
    there, never below the batch before it (a batch-size warm-up, as the paper's)."""
    if len(points) != len(critical):
        raise ValueError(f"batch_schedule: {len(points)} points but {len(critical)} critical batch sizes")
    schedule = [(0, start)]
    for point, batch in zip(points, critical):
        batch = max(batch, schedule[-1][1])
        if batch != schedule[-1][1]:
            schedule.append((point, batch))
    return schedule
