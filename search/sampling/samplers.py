"""Sampler names from the spec -> seeded Optuna samplers."""

from __future__ import annotations

from collections.abc import Callable

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.samplers import BaseSampler

from spaces.params import SearchSpace

from search.seeds import component_seed

__all__ = ["make_sampler", "grid_of", "AskTellGridSampler"]


def grid_of(distributions: dict[str, BaseDistribution]) -> dict[str, list]:
    """Every value of each discrete distribution, for the grid sampler."""
    grid: dict[str, list] = {}
    for name, dist in distributions.items():
        if isinstance(dist, CategoricalDistribution):
            grid[name] = list(dist.choices)
        elif isinstance(dist, IntDistribution):
            grid[name] = list(range(dist.low, dist.high + 1, dist.step))
        else:
            raise ValueError(f"parameter {name!r} is continuous; the grid sampler needs discrete parameters")
    return grid


class AskTellGridSampler(optuna.samplers.GridSampler):
    """Optuna's grid sampler without its ``study.stop()`` once the grid is covered.

    ``study.stop()`` only works inside ``study.optimize``; the campaign loop uses
    ask/tell and stops at its own trial budget (past a covered grid, points repeat).
    """

    def after_trial(self, study, trial, state, values) -> None:  # type: ignore[no-untyped-def]
        return None


def _evolution(space: SearchSpace, seed: int) -> BaseSampler:
    from search.sampling.evolution import evolution_sampler_for

    return evolution_sampler_for(space, seed)


_FACTORIES: dict[str, Callable[[SearchSpace, int], BaseSampler]] = {
    "tpe": lambda space, seed: optuna.samplers.TPESampler(seed=seed),
    "random": lambda space, seed: optuna.samplers.RandomSampler(seed=seed),
    "cmaes": lambda space, seed: optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False),
    "gp": lambda space, seed: optuna.samplers.GPSampler(seed=seed),
    "qmc": lambda space, seed: optuna.samplers.QMCSampler(seed=seed, warn_independent_sampling=False),
    "grid": lambda space, seed: AskTellGridSampler(grid_of(space.distributions()), seed=seed),
    "nsga2": lambda space, seed: optuna.samplers.NSGAIISampler(seed=seed),
    "evolution": _evolution,
}


def make_sampler(name: str, space: SearchSpace, study_seed: int) -> BaseSampler:
    """The sampler ``name``, seeded from the study seed."""
    if name not in _FACTORIES:
        raise ValueError(f"sampler {name!r} is not one of {', '.join(_FACTORIES)}")
    return _FACTORIES[name](space, component_seed(study_seed, "sampler"))
