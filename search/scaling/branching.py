"""The critical batch size over training, measured directly: the branching study's plan and its rules.

After Merrill et al., "Critical Batch Size Revisited" (AI2, 2025): one reference run at a small batch
checkpoints at several points; from each point, short branches at several batch sizes (each over a small
grid of learning rates around the reference's, scaled to the branch's batch by a rule) train the same
number of examples; the critical batch size at that point is the largest batch whose best branch ends
within ``epsilon`` (relative) of the best loss any batch reached there. A batch-size schedule follows:
from each point on, train at the critical batch size measured there (never smaller than before: a warm-up).

This module holds the rules (the study's settings, validated at construction, are
:class:`search.spec.branching.BranchingSpec`, the spec's ``[scaling.branching]``);
:mod:`search.scaling.branch_run` runs the trials.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from search.spec.branching import BranchingSpec

__all__ = ["BranchingSpec", "Branch", "best_per_batch", "at_grid_edge", "widening", "critical_batch", "batch_schedule"]


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
