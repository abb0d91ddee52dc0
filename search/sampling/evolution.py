"""Regularized (aging) evolution as an Optuna sampler (Real et al. 2019, AmoebaNet).

The architecture parameters -- the flat names of ``space.distributions(prefix)`` -- are
sampled jointly by :meth:`RegularizedEvolutionSampler.sample_relative`:

1. While fewer than ``population_size`` COMPLETE trials carry a genome, a uniformly
   random genome (``space.sample``).
2. Then the population is the ``population_size`` most recently completed such trials
   (ordered by ``datetime_complete``, ties by trial number): older trials age out, however
   good. ``sample_size`` of them are drawn without replacement, the best one (by
   ``study.direction``) is the parent, and the child is ``spaces.mutations.mutate`` of it.

Only completed trials are read, so trials may finish in any order (asynchronous
workers, ``ask``/``tell``); for a given seed and completion order the sequence of
genomes is the same. Every other parameter goes to ``base_sampler.sample_independent``
(default: ``TPESampler`` seeded from ``seed``), including any non-architecture name in a
search space handed to ``sample_relative`` (so Optuna's sampler contract suites pass).

Lineage is written to each trial's system attrs through the storage API
(``study._storage.set_trial_system_attr``; the public ``Trial.set_system_attr`` was
removed from Optuna): :data:`GENOME_ATTR` (canonical genome string), :data:`PARENT_ATTR`
(parent trial number, ``None`` for a random genome) and :data:`MUTATION_ATTR`
(``"random"`` or the mutation kind). The sampler also keeps it in :attr:`lineage`.

A trial's genome is decoded from its params; a trial without the architecture params
falls back to its :data:`GENOME_ATTR`, and a trial with neither is not part of the
population. Multi-objective studies are refused with ``ValueError``.

The sampler pickles with its generator state: an unpickled copy continues the same
random stream. Like Optuna's own samplers, ``reseed_rng`` (called by
``study.optimize(n_jobs>1)``) re-seeds from fresh entropy.
"""

from __future__ import annotations

import dataclasses
import datetime
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState

from spaces.architecture import GenomeParam
from spaces.params import SearchSpace
from spaces.genomes import CellGenome, CellSpace, Genome, LayerGenome, LayerSpace, SupportsSuggest
from spaces.mutations import mutate_with_kind

__all__ = [
    "evolution_sampler_for",
    "GENOME_ATTR",
    "MUTATION_ATTR",
    "PARENT_ATTR",
    "Lineage",
    "RegularizedEvolutionSampler",
]

GENOME_ATTR = "evolution:genome"
PARENT_ATTR = "evolution:parent"
MUTATION_ATTR = "evolution:mutation"


@dataclasses.dataclass(frozen=True)
class Lineage:
    """Where one trial's genome came from."""

    genome: str
    parent: int | None
    mutation: str  # "random" or a spaces.mutations.Mutation value


class RegularizedEvolutionSampler(BaseSampler):
    """Aging evolution over ``space``'s architecture params; the rest via ``base_sampler``.

    Args:
        space: the genome space (:class:`LayerSpace` or :class:`CellSpace`).
        prefix: parameter name prefix, as in ``space.distributions(prefix)``.
        population_size: trials in the population (and random trials before evolving).
        sample_size: trials drawn for each tournament; ``1 <= sample_size <= population_size``.
        seed: seeds the sampler's ``numpy.random.Generator`` and the default base sampler.
        base_sampler: samples every non-architecture parameter.
    """

    def __init__(
        self,
        space: LayerSpace | CellSpace,
        prefix: str = "arch",
        population_size: int = 20,
        sample_size: int = 5,
        seed: int | None = None,
        base_sampler: BaseSampler | None = None,
    ) -> None:
        if not isinstance(space, (LayerSpace, CellSpace)):
            raise ValueError(f"space {space!r} must be a LayerSpace or a CellSpace")
        if not isinstance(prefix, str) or not prefix:
            raise ValueError(f"prefix {prefix!r} must be a non-empty str")
        for name, value in (("population_size", population_size), ("sample_size", sample_size)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}={value!r} must be an int >= 1")
        if sample_size > population_size:
            raise ValueError(
                f"sample_size={sample_size} must be <= population_size={population_size}"
            )
        if base_sampler is not None and not isinstance(base_sampler, BaseSampler):
            raise ValueError(f"base_sampler {base_sampler!r} must be an optuna BaseSampler")
        self.space = space
        self.prefix = prefix
        self.population_size = population_size
        self.sample_size = sample_size
        evolution_seed, base_seed = np.random.SeedSequence(seed).spawn(2)
        self._rng = np.random.Generator(np.random.PCG64(evolution_seed))
        if base_sampler is None:
            base_seed_int = int(base_seed.generate_state(1)[0]) if seed is not None else None
            base_sampler = optuna.samplers.TPESampler(seed=base_seed_int)
        self.base_sampler = base_sampler
        self._distributions = space.distributions(prefix)
        self._lineage: dict[int, Lineage] = {}
        self._lock = threading.Lock()

    # -- pickling: everything but the lock (the generator keeps its state)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # -- public helpers

    @property
    def lineage(self) -> dict[int, Lineage]:
        """Trial number -> :class:`Lineage`, for the trials this sampler instance sampled."""
        with self._lock:
            return dict(self._lineage)

    def suggest(self, trial: SupportsSuggest) -> Genome:
        """Suggest this sampler's genome in ``trial`` (``space.suggest(trial, prefix)``)."""
        return self.space.suggest(trial, self.prefix)

    def genome_of(self, trial: FrozenTrial) -> Genome | None:
        """The genome of ``trial`` from its params, else its :data:`GENOME_ATTR`, else None."""
        try:
            return self.space.decode(trial.params, self.prefix)
        except ValueError:
            pass
        text = trial.system_attrs.get(GENOME_ATTR)
        if not isinstance(text, str):
            return None
        try:
            genome = (
                CellGenome.from_string(text)
                if isinstance(self.space, CellSpace)
                else LayerGenome.from_string(text)
            )
            self.space.validate(genome)  # type: ignore[arg-type]
        except ValueError:
            return None
        return genome

    # -- BaseSampler

    def reseed_rng(self) -> None:
        with self._lock:
            self._rng = np.random.default_rng()
        self.base_sampler.reseed_rng()

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        self._check_single_objective(study)
        return dict(self._distributions)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        self._check_single_objective(study)
        out: dict[str, Any] = {}
        if any(name in self._distributions for name in search_space):
            genome, lineage = self._next_genome(study)
            encoded = self.space.encode(genome, self.prefix)  # type: ignore[arg-type]
            out.update({k: v for k, v in encoded.items() if k in search_space})
            self._record(study, trial, lineage)
        for name, distribution in search_space.items():
            if name not in out:  # a relative space wider than ours: sample it independently
                out[name] = self.base_sampler.sample_independent(study, trial, name, distribution)
        return out

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        self._check_single_objective(study)
        return self.base_sampler.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self.base_sampler.before_trial(study, trial)

    def after_trial(
        self,
        study: Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self.base_sampler.after_trial(study, trial, state, values)

    # -- the algorithm

    def _check_single_objective(self, study: Study) -> None:
        if len(study.directions) != 1:
            raise ValueError(
                f"RegularizedEvolutionSampler needs a single-objective study; this one has "
                f"{len(study.directions)} directions"
            )

    def _population(self, study: Study) -> list[tuple[FrozenTrial, Genome]]:
        """Up to ``population_size`` most recently completed trials with a genome, oldest first."""
        done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        done.sort(key=lambda t: (t.datetime_complete or datetime.datetime.min, t.number))
        population: list[tuple[FrozenTrial, Genome]] = []
        for t in reversed(done):
            genome = self.genome_of(t)
            if genome is not None:
                population.append((t, genome))
                if len(population) == self.population_size:
                    break
        population.reverse()
        return population

    def _next_genome(self, study: Study) -> tuple[Genome, Lineage]:
        population = self._population(study)
        with self._lock:
            if len(population) < self.population_size:
                genome = self.space.sample(self._rng)
                return genome, Lineage(genome.to_string(), None, "random")
            picks = self._rng.choice(len(population), size=self.sample_size, replace=False)
            sign = -1.0 if study.direction == StudyDirection.MAXIMIZE else 1.0
            best = min(picks, key=lambda i: sign * float(population[i][0].value))  # type: ignore[arg-type]
            parent, parent_genome = population[int(best)]
            child, kind = mutate_with_kind(parent_genome, self.space, self._rng)  # type: ignore[type-var]
        return child, Lineage(child.to_string(), parent.number, kind.value)

    def _record(self, study: Study, trial: FrozenTrial, lineage: Lineage) -> None:
        with self._lock:
            self._lineage[trial.number] = lineage
        storage = study._storage
        storage.set_trial_system_attr(trial._trial_id, GENOME_ATTR, lineage.genome)
        storage.set_trial_system_attr(trial._trial_id, PARENT_ATTR, lineage.parent)
        storage.set_trial_system_attr(trial._trial_id, MUTATION_ATTR, lineage.mutation)


def evolution_sampler_for(space: SearchSpace, seed: int, population_size: int = 20, sample_size: int = 5) -> RegularizedEvolutionSampler:
    """The evolution sampler for the one architecture parameter of ``space``; TPE for the rest."""
    genomes = [p for p in space if isinstance(p, GenomeParam)]
    if len(genomes) != 1:
        raise ValueError(
            f"sampler 'evolution' needs exactly one architecture parameter "
            f"(type 'layers' or 'cell') in [space]; found {len(genomes)}"
        )
    return RegularizedEvolutionSampler(
        genomes[0].space, prefix=genomes[0].name, population_size=population_size, sample_size=sample_size, seed=seed
    )
