"""The spec's ``[scaling]`` section: which global batch sizes a scaling sweep runs, and to which target.

The sweep itself (its sampler, the fits, the plots) is :mod:`search.scaling`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from search.spec.batch_sizes import ScalingError, validate_batch_sizes
from search.spec.table import SpecTable
from spaces.params import CategoricalParam, SearchSpace

__all__ = ["ScalingSpec", "SCALING_KEYS", "parse_scaling", "OBJECTIVE", "BATCH", "with_batch_sizes"]

SCALING_KEYS = ("batch_sizes", "target", "trials_per_batch", "bootstrap", "interpolate")
OBJECTIVE = "steps_to_target"  # what a sweep's study minimises
BATCH = "batch_size"  # the [space] name the sweep assigns


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

    @property
    def n_trials(self) -> int:
        return self.trials_per_batch * len(self.batch_sizes)


def parse_scaling(t: SpecTable) -> ScalingSpec:
    if "batch_sizes" not in t.data:
        raise t.error("batch_sizes", "is required: the global batch sizes to sweep, e.g. [16, 32, 64, 128]")
    try:
        sizes = validate_batch_sizes(t.data["batch_sizes"], key="batch_sizes")
    except ScalingError as exc:
        raise t.error(exc.key, exc.problem) from None
    return ScalingSpec(
        batch_sizes=sizes,
        target=t.float("target"),
        trials_per_batch=t.int("trials_per_batch", 6, minimum=1),
        bootstrap=t.int("bootstrap", 1000, minimum=10),
        interpolate=t.bool("interpolate", True),
    )


def with_batch_sizes(space: SearchSpace, sizes: Sequence[int]) -> SearchSpace:
    """The spec's space plus ``batch_size`` over the sweep's sizes (the sampler assigns it)."""
    return SearchSpace((*space.params, CategoricalParam(BATCH, tuple(int(b) for b in sizes))))
