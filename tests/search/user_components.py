"""A user's own Optuna sampler and pruner, as a spec names them (``"user_components:LowerHalfSampler"``)."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.distributions import BaseDistribution, FloatDistribution, IntDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.trial import FrozenTrial


class LowerHalfSampler(BaseSampler):
    """Random sampling in the lower ``fraction`` of every numeric range (categoricals: at random)."""

    def __init__(self, fraction: float = 0.5, seed: int | None = None) -> None:
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"fraction={fraction!r}: must be in (0, 1]")
        self.fraction = fraction
        self.seed = seed
        self._random = RandomSampler(seed=seed)

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial, search_space: dict) -> dict[str, Any]:
        return {}

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        dist = param_distribution
        if isinstance(dist, FloatDistribution) and not dist.log and dist.step is None:
            dist = FloatDistribution(dist.low, dist.low + self.fraction * (dist.high - dist.low))
        elif isinstance(dist, IntDistribution) and not dist.log:
            span = (dist.high - dist.low) // dist.step
            dist = IntDistribution(dist.low, dist.low + int(self.fraction * span) * dist.step, step=dist.step)
        return self._random.sample_independent(study, trial, param_name, dist)

    def reseed_rng(self) -> None:
        self._random.reseed_rng()


class StopBelow(optuna.pruners.BasePruner):
    """Prunes a trial whose latest intermediate value is below ``threshold``."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        step = trial.last_step
        return step is not None and trial.intermediate_values[step] < self.threshold


class LockedSampler(RandomSampler):
    """A random sampler holding a lock: it neither pickles nor deep-copies, and needs an argument to build."""

    def __init__(self, tag: str, seed: int | None = None) -> None:
        import threading

        super().__init__(seed=seed)
        self.tag = tag
        self._lock = threading.Lock()
