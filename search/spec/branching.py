"""The spec's ``[scaling.branching]`` table: a branching study's settings (:class:`BranchingSpec`), checked.

After Merrill et al., "Critical Batch Size Revisited" (AI2, 2025): a reference run at the smallest batch
checkpoints at ``points``; from each, short branches at ``batch_sizes`` x ``lr_factors`` train
``branch_epochs`` more epochs; the critical batch size at a point is the largest batch whose tuned loss is
within ``epsilon`` of the best there. The rules are :mod:`search.scaling.branching`; the runs
:mod:`search.scaling.branch_run` and :mod:`search.session.branching`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from search.spec.table import SpecError, SpecTable
from spaces.batch import LRScaling

__all__ = ["BranchingSpec", "BRANCHING_KEYS", "parse_branching", "reference_problem"]

BRANCHING_KEYS = (
    "points",
    "lr",
    "batch_sizes",
    "reference_batch",
    "epochs",
    "branch_epochs",
    "lr_factors",
    "lr_rule",
    "epsilon",
    "widen",
)


@dataclasses.dataclass(frozen=True)
class BranchingSpec:
    """What a branching study measures (``[scaling.branching]``; every check at construction)."""

    points: tuple[int, ...]
    """The reference run's epochs to branch from: strictly increasing ints >= 1, each before `epochs`. Required."""
    batch_sizes: tuple[int, ...]
    """The branches' global batch sizes, distinct ints >= 1; the smallest is the reference's (in a spec: default
    the `[scaling]` batch_sizes)."""
    reference_batch: int
    """The reference run's batch: the smallest of `batch_sizes` (in a spec: leave it out)."""
    epochs: int
    """The reference run's (and the scheduled run's) length in epochs, > the last point (in a spec: default
    `[trainer] epochs`)."""
    branch_epochs: int = 1
    """How many epochs each branch trains from its point (the same examples for every batch size)."""
    lr_factors: tuple[float, ...] = (0.5, 1.0, 2.0)
    """The rates each branch tries: these factors (> 0) times the reference's `lr` scaled to its batch by
    `lr_rule`; a batch's tuned rate is its branch of lowest validation loss."""
    lr_rule: str = "linear"
    """How `lr` scales from the reference batch to a branch's: `"none"`, `"linear"` or `"sqrt"`."""
    epsilon: float = 0.01
    """The tolerance of the critical-batch rule, in [0, 1): the largest batch whose tuned loss is at most
    (1 + epsilon) x the lowest there."""
    widen: int = 0
    """Rounds that add, for a batch whose tuned rate is the lowest or highest it tried, one rate a step (2x)
    beyond (0: none)."""
    lr: float | None = None
    """The reference run's learning rate at `reference_batch` (a constant rate, no warmup). Required in a spec."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "points", tuple(self.points))
        object.__setattr__(self, "batch_sizes", tuple(sorted(self.batch_sizes)))
        object.__setattr__(self, "lr_factors", tuple(self.lr_factors))
        if not self.points or any(not _is_int(p) or p < 1 for p in self.points):
            raise ValueError(f"branching points={self.points!r}: must be a non-empty list of epochs >= 1")
        if list(self.points) != sorted(set(self.points)):
            raise ValueError(f"branching points={self.points!r}: must be strictly increasing")
        if not _is_int(self.epochs) or self.epochs <= self.points[-1]:
            raise ValueError(f"branching epochs={self.epochs!r}: must be an int > the last point {self.points[-1]}")
        sizes = self.batch_sizes
        if not sizes or any(not _is_int(b) or b < 1 for b in sizes) or len(set(sizes)) != len(sizes):
            raise ValueError(f"branching batch_sizes={sizes!r}: must be distinct ints >= 1")
        if self.reference_batch not in sizes or self.reference_batch != sizes[0]:
            raise ValueError(
                f"branching reference_batch={self.reference_batch!r}: must be the smallest of batch_sizes {sizes}"
            )
        if not _is_int(self.branch_epochs) or self.branch_epochs < 1:
            raise ValueError(f"branching branch_epochs={self.branch_epochs!r}: must be an int >= 1")
        if not self.lr_factors or any(not _is_positive(f) for f in self.lr_factors):
            raise ValueError(f"branching lr_factors={self.lr_factors!r}: must be a non-empty list of numbers > 0")
        object.__setattr__(self, "lr_factors", tuple(float(f) for f in self.lr_factors))
        LRScaling(self.lr_rule, self.reference_batch)  # names the rule and its choices when it is not one
        if not _is_int(self.widen) or self.widen < 0:
            raise ValueError(f"branching widen={self.widen!r}: must be an int >= 0 (rounds)")
        if not _is_number(self.epsilon) or not 0 <= self.epsilon < 1:
            raise ValueError(f"branching epsilon={self.epsilon!r}: must be in [0, 1)")
        if self.lr is not None and not _is_positive(self.lr):
            raise ValueError(f"branching lr={self.lr!r}: must be a finite number > 0 (the reference's rate)")

    def branch_lr(self, reference_lr: float, batch_size: int, factor: float) -> float:
        """The learning rate a branch at ``batch_size`` takes: the reference's scaled by the rule, times ``factor``."""
        return factor * LRScaling(self.lr_rule, self.reference_batch)(reference_lr, batch_size)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_positive(value: Any) -> bool:
    return _is_number(value) and value > 0


def _list(t: SpecTable, name: str, default: Sequence[Any]) -> tuple[Any, ...]:
    value = t.data.get(name, default)
    if not isinstance(value, (list, tuple)):
        raise t.error(name, f"must be a list, got {type(value).__name__} {value!r}")
    return tuple(value)


def parse_branching(t: SpecTable, sweep_sizes: Sequence[int], trainer_epochs: int) -> BranchingSpec:
    """``[scaling.branching]``: the sweep's batch sizes and ``[trainer] epochs`` where it leaves them out."""
    if "points" not in t.data:
        raise t.error("points", "is required: the reference run's epochs to branch from, e.g. [1, 2, 4]")
    if "lr" not in t.data:
        raise t.error("lr", "is required: the reference run's learning rate at the smallest batch size, e.g. 0.02")
    sizes = _list(t, "batch_sizes", sweep_sizes)
    smallest = min((b for b in sizes if _is_int(b)), default=0)
    try:
        return BranchingSpec(
            points=_list(t, "points", ()),
            batch_sizes=sizes,
            reference_batch=t.data.get("reference_batch", smallest),
            epochs=t.data.get("epochs", trainer_epochs),
            branch_epochs=t.data.get("branch_epochs", 1),
            lr_factors=_list(t, "lr_factors", (0.5, 1.0, 2.0)),
            lr_rule=t.choice("lr_rule", LRScaling.RULES, "linear"),
            epsilon=t.data.get("epsilon", 0.01),
            widen=t.data.get("widen", 0),
            lr=t.data["lr"],
        )
    except (ValueError, TypeError) as exc:
        message = str(exc).removeprefix("branching ")
        name = message.partition("=")[0]
        raise (t.error(name, message) if name in BRANCHING_KEYS else SpecError(t.source, t.prefix, message)) from None


def reference_problem(names: Sequence[str], fixed: Mapping[str, Any]) -> str | None:
    """Why a space with parameters ``names`` (``fixed``: the constant ones) cannot give the reference run's
    parameters (None: it can): every parameter but ``lr`` and ``batch_size`` fixed, a constant rate, no warmup."""
    searched = [n for n in names if n not in fixed and n not in ("lr", "batch_size")]
    if searched:
        return f"the branching runs need every [space] parameter but lr fixed; {', '.join(searched)} searched"
    if fixed.get("schedule", "constant") != "constant":
        return (
            f'the branching runs need [space] schedule = "constant" (branches change batch), not {fixed["schedule"]!r}'
        )
    if fixed.get("warmup", 0) not in (0, 0.0):
        return f"the branching runs need no warmup ([space] warmup = 0), not {fixed['warmup']!r}"
    return None
