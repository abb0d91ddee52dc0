"""The spec's ``[scaling]`` section: which global batch sizes a scaling sweep runs, and to which target.

The sweep itself (its sampler, the fits, the plots) is :mod:`search.scaling`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from search.spec.batch_sizes import ScalingError, validate_batch_sizes
from search.spec.branching import BRANCHING_KEYS, BranchingSpec, parse_branching, reference_problem
from search.spec.table import SpecError, SpecTable
from spaces.params import CategoricalParam, FloatParam, SearchSpace

__all__ = [
    "ScalingSpec",
    "SCALING_KEYS",
    "parse_scaling",
    "OBJECTIVE",
    "BATCH",
    "LR",
    "with_batch_sizes",
    "lr_grid_problem",
]

SCALING_KEYS = (
    "batch_sizes",
    "target",
    "trials_per_batch",
    "bootstrap",
    "interpolate",
    "lr_grid",
    "lr_step",
    "branching",
)
OBJECTIVE = "steps_to_target"  # what a sweep's study minimises
BATCH = "batch_size"  # the [space] name the sweep assigns
LR = "lr"  # the [space] name an lr_grid sets


@dataclasses.dataclass(frozen=True)
class ScalingSpec:
    """The sweep: which global batch sizes, which target on the study's metric, how many trials each."""

    batch_sizes: tuple[int, ...]
    """The global batch sizes to sweep: positive integers, at least 3, each once. Required."""
    target: float
    """The target on the study's metric; `direction` says whether >= or <= reaches it. Required."""
    trials_per_batch: int = 6
    """The inner search's budget per batch size (`n_trials` follows)."""
    bootstrap: int = 1000
    """Resamples for the B_crit interval (at least 10)."""
    interpolate: bool = True  # steps to target interpolated between reports (False: report granularity)
    """Steps to target interpolated between reports (false: at report granularity)."""
    lr_grid: int = 0
    """Learning rates per batch size on a log grid (at least 3; 0: the study's sampler searches `lr`,
    `trials_per_batch` trials). Centred on the geometric middle of `[space] lr` (scaled to each batch size by
    `lr_scaling`), `lr_step` apart; a batch size whose best rate is its lowest or highest gets a rate one step
    further out, until its best is inside (bracketed) or the next rate would leave `[space] lr`."""
    lr_step: float = 2.0
    """The ratio between neighbouring rates of `lr_grid` (> 1)."""
    branching: BranchingSpec | None = None
    """`[scaling.branching]`: after the sweep, the critical batch size at points of one run, measured by branches
    off its checkpoints, and the batch-size schedule it gives, tested (see its own table); none: no such study."""

    @property
    def n_trials(self) -> int:
        """The first round's trials: the grid, or ``trials_per_batch`` per batch size (widening adds to it)."""
        return (self.lr_grid or self.trials_per_batch) * len(self.batch_sizes)


def parse_scaling(t: SpecTable, trainer_epochs: int = 1) -> ScalingSpec:
    """``[scaling]`` (``trainer_epochs``: ``[scaling.branching] epochs``' default)."""
    if "batch_sizes" not in t.data:
        raise t.error("batch_sizes", "is required: the global batch sizes to sweep, e.g. [16, 32, 64, 128]")
    try:
        sizes = validate_batch_sizes(t.data["batch_sizes"], key="batch_sizes")
    except ScalingError as exc:
        raise t.error(exc.key, exc.problem) from None
    grid = t.int("lr_grid", 0, minimum=0)
    if grid and grid < 3:
        raise t.error(
            "lr_grid", f"must be 0 (no grid) or at least 3 rates, so that a best rate can lie inside, got {grid}"
        )
    if grid and t.has("trials_per_batch"):
        raise t.error("trials_per_batch", "leave it out with lr_grid: each batch size runs its lr_grid rates")
    step = t.float("lr_step", 2.0)
    if not step > 1.0:
        raise t.error("lr_step", f"must be > 1 (the ratio between neighbouring rates), got {step:g}")
    branching = None
    if t.has("branching"):
        table = SpecTable(t.source, t.key("branching"), t.table("branching"), BRANCHING_KEYS)
        branching = parse_branching(table, sizes, trainer_epochs)
    return ScalingSpec(
        batch_sizes=sizes,
        target=t.float("target"),
        trials_per_batch=t.int("trials_per_batch", 6, minimum=1),
        bootstrap=t.int("bootstrap", 1000, minimum=10),
        interpolate=t.bool("interpolate", True),
        lr_grid=grid,
        lr_step=step,
        branching=branching,
    )


def lr_grid_problem(scaling: ScalingSpec, space: SearchSpace) -> str | None:
    """Why ``space`` cannot hold the sweep's learning-rate grid (None: it can, or there is no grid)."""
    if not scaling.lr_grid:
        return None
    lr = next((p for p in space.params if p.name == LR), None)
    if not isinstance(lr, FloatParam) or not lr.log:
        return 'lr_grid needs [space] lr = { type = "float", low = ..., high = ..., log = true }: the grid\'s range'
    span = scaling.lr_step ** (scaling.lr_grid - 1)
    if lr.high / lr.low < span * (1 - 1e-9):
        return (
            f"{scaling.lr_grid} rates {scaling.lr_step:g}x apart span {span:g}x, wider than [space] lr "
            f"({lr.low:g} to {lr.high:g}, {lr.high / lr.low:g}x); widen lr's range or use fewer rates"
        )
    return None


def sweep_space(source: str, scaling: ScalingSpec, space: SearchSpace) -> SearchSpace:
    """The sweep's space (:func:`with_batch_sizes`), once ``space`` is checked to hold its ``lr_grid``."""
    if grid := lr_grid_problem(scaling, space):
        raise SpecError(source, "scaling.lr_grid", grid)
    if scaling.branching is not None and (problem := reference_problem(space.names, space.fixed())):
        raise SpecError(source, "scaling.branching", problem)
    return with_batch_sizes(space, scaling.batch_sizes)


def with_batch_sizes(space: SearchSpace, sizes: Sequence[int]) -> SearchSpace:
    """The spec's space plus ``batch_size`` over the sweep's sizes (the sampler assigns it)."""
    return SearchSpace((*space.params, CategoricalParam(BATCH, tuple(int(b) for b in sizes))))
