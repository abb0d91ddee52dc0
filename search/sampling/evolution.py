"""Regularized (aging) evolution as an Optuna sampler (Real et al. 2019, AmoebaNet), made for
asynchronous workers.

The architecture parameters -- the flat names of ``space.distributions(prefix)`` -- are
sampled jointly by :meth:`RegularizedEvolutionSampler.sample_relative`:

1. **Start.** Random genomes (``space.sample``) until ``n_startup_trials`` COMPLETE trials
   carry a genome. The default, ``"auto"``, scales the start with the budget as well as
   the workers: a genome is random while fewer than ``max(4, ceil(in_flight / 8))``
   trials have finished (``in_flight`` counts the study's other RUNNING and WAITING
   trials when this one is sampled, about the number of busy workers: 4 on up to 32
   workers, 8 on 64), or while fewer than ``ceil(budget / 10)`` trials carry a genome at
   all (``budget`` is the campaign's trial budget, ``[study] n_trials``: 10 random of
   100, 20 of 200), both capped at ``population_size``. On one worker the second rule
   decides (a 4-trial start stalls on the first good cell: TPE was ahead at 200
   evaluations, bench/NOTES.md); on 64 workers the first 64 asks are random anyway and
   the first rule decides (a whole population of 20 finished first would leave nearly
   every trial of a 100-trial search random). Without a budget only the first rule holds.
2. **Population.** The ``population_size`` most recently completed such trials (ordered by
   ``datetime_complete``, ties by trial number), or all of them while there are fewer:
   older trials age out, however good.
3. **Tournament.** ``min(sample_size, len(population))`` of them are drawn without
   replacement and the best one (by ``study.direction``) is the parent. ``sample_size``
   defaults to half the population: while few trials have finished the parent is the
   best of them, later the best of a random half of the recent ones.
4. **Child.** ``candidates`` distinct mutants of the parent (``spaces.mutations``) are
   drawn and the one an additive model of the finished trials rates best becomes the
   child. The model is a ridge regression (penalty ``RIDGE``) of the objective's ranks
   among the most recent ``MODEL_WINDOW`` finished trials (0 = worst, 1 = best, so one
   diverged trial weighs no more than a poor one) on one indicator per architecture
   parameter and value (its one-hot encoding); a mutant's rating is the sum of its
   values' coefficients, drawn from the regression's posterior at each ask (Thompson
   sampling, with the residual variance on the fit's residual degrees of freedom): the
   child is the mutant most likely best, not the one the point estimate rates best. With
   the point estimate, one worker's asks -- each from the same model plus one trial --
   all follow its current preferences: on NAS-Bench-201 at one worker the last
   improvement came near trial 44 of 200 (tuning seeds, bench/NOTES.md), against 154 for
   plain mutation; the draw explores values the data cannot yet tell apart and follows
   those it can, the same rule at every worker count. ``candidates = 1`` is plain
   mutation (no model, no draw). (The earlier TPE-style
   log ratio of value frequencies among the best quarter and the rest used only which
   side of that cut a trial fell on; the regression uses every finished trial's rank,
   which matters while few have finished, e.g. on 64 workers: bench/NOTES.md.)
5. **No repeats.** With ``skip_duplicates`` (default) neither a random genome nor a
   mutant repeats a genome that any trial of the study already has (finished, failed,
   pruned, running or waiting: a table or a deterministic trainer gains nothing from a
   second evaluation, and with many workers the same good parent is drawn again and
   again). Up to ``MAX_DRAWS`` draws are made; when every single mutation of the parent
   is taken, the candidates are two mutations away from it (the lineage records the
   second one's kind), and when those are taken too, a repeat is accepted.

``RegularizedEvolutionSampler(space, population_size=P, sample_size=S,
n_startup_trials=P, candidates=1, skip_duplicates=False)`` is the classic algorithm
(P random trials, then tournament of S and one mutation), draw for draw as the sampler
drew it before these knobs existed. ``python -m bench.evolution`` compares the default
with random search and TPE on NAS-Bench-201 at 1, 16 and 64 asynchronous workers.

Only completed trials are selected from, so trials may finish in any order
(asynchronous workers, ``ask``/``tell``); for a given seed and sequence of study states
the sequence of genomes is the same. Every other parameter goes to
``base_sampler.sample_independent`` (default: ``TPESampler`` seeded from ``seed``),
including any non-architecture name in a search space handed to ``sample_relative``
(so Optuna's sampler contract suites pass).

Lineage is written to each trial's system attrs through the storage API
(``set_trial_system_attr`` through :mod:`search.compat.optuna_private`; the public ``Trial.set_system_attr`` was
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
import math
import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState

from search.compat import optuna_private as op
from spaces.architecture import GenomeParam
from spaces.genomes import CellGenome, CellSpace, Genome, LayerGenome, LayerSpace, SupportsSuggest
from spaces.mutations import mutate_with_kind
from spaces.params import SearchSpace

__all__ = [
    "evolution_sampler_for",
    "GENOME_ATTR",
    "MUTATION_ATTR",
    "PARENT_ATTR",
    "MODEL_WINDOW",
    "RIDGE",
    "MAX_DRAWS",
    "Lineage",
    "RegularizedEvolutionSampler",
]

GENOME_ATTR = "evolution:genome"
PARENT_ATTR = "evolution:parent"
MUTATION_ATTR = "evolution:mutation"

RIDGE = 1.0  # the candidate model's ridge penalty (on one-hot features, ranks scaled to [0, 1])
MODEL_WINDOW = 200  # the candidate model reads at most this many of the most recent finished trials
MAX_DRAWS = 100  # draws for new genomes per ask (skip_duplicates), then two mutations, then a repeat
_ACTIVE = (TrialState.RUNNING, TrialState.WAITING)
START_SHARE = 0.1  # of the trial budget drawn at random before the first mutation ("auto" start)


@dataclasses.dataclass(frozen=True)
class Lineage:
    """Where one trial's genome came from."""

    genome: str
    parent: int | None
    mutation: str  # "random" or a spaces.mutations.Mutation value


def _check_int(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}={value!r} must be an int >= 1")


class RegularizedEvolutionSampler(BaseSampler):
    """Aging evolution over ``space``'s architecture params; the rest via ``base_sampler``.

    Args:
        space: the genome space (:class:`LayerSpace` or :class:`CellSpace`).
        prefix: parameter name prefix, as in ``space.distributions(prefix)``.
        population_size: the most recently finished trials that make up the population.
        sample_size: trials drawn for each tournament, ``1 <= sample_size <=
            population_size``; default (None) ``max(1, population_size // 2)``. Fewer are
            drawn while the population is smaller.
        seed: seeds the sampler's ``numpy.random.Generator`` and the default base sampler.
        base_sampler: samples every non-architecture parameter.
        n_startup_trials: finished trials before the first mutation (random genomes until
            then); ``"auto"`` (default) scales it to the trials in flight and ``budget``,
            see the module docstring; ``population_size`` is the classic start.
        budget: the campaign's trial budget (``[study] n_trials``), for the ``"auto"``
            start; None (a time budget, or a bare study) scales it to the workers only.
        candidates: mutants of the parent rated by the model of the finished trials, the
            best one is the child; 1 is plain mutation.
        skip_duplicates: never propose a genome a trial of the study already has (until
            :data:`MAX_DRAWS` draws fail).
    """

    def __init__(
        self,
        space: LayerSpace | CellSpace,
        prefix: str = "arch",
        population_size: int = 20,
        sample_size: int | None = None,
        seed: int | None = None,
        base_sampler: BaseSampler | None = None,
        *,
        n_startup_trials: int | Literal["auto"] = "auto",
        candidates: int = 16,
        skip_duplicates: bool = True,
        budget: int | None = None,
    ) -> None:
        if not isinstance(space, (LayerSpace, CellSpace)):
            raise ValueError(f"space {space!r} must be a LayerSpace or a CellSpace")
        if not isinstance(prefix, str) or not prefix:
            raise ValueError(f"prefix {prefix!r} must be a non-empty str")
        _check_int("population_size", population_size)
        if sample_size is None:
            sample_size = max(1, population_size // 2)
        _check_int("sample_size", sample_size)
        if sample_size > population_size:
            raise ValueError(f"sample_size={sample_size} must be <= population_size={population_size}")
        if n_startup_trials != "auto":
            _check_int("n_startup_trials", n_startup_trials)
        _check_int("candidates", candidates)
        if budget is not None:
            _check_int("budget", budget)
        if not isinstance(skip_duplicates, bool):
            raise ValueError(f"skip_duplicates={skip_duplicates!r} must be a bool")
        if base_sampler is not None and not isinstance(base_sampler, BaseSampler):
            raise ValueError(f"base_sampler {base_sampler!r} must be an optuna BaseSampler")
        self.space = space
        self.prefix = prefix
        self.population_size = population_size
        self.sample_size = sample_size
        self.n_startup_trials: int | Literal["auto"] = n_startup_trials
        self.candidates = candidates
        self.skip_duplicates = skip_duplicates
        self.budget = budget
        evolution_seed, base_seed = np.random.SeedSequence(seed).spawn(2)
        self._rng = np.random.Generator(np.random.PCG64(evolution_seed))
        if base_sampler is None:
            base_seed_int = int(base_seed.generate_state(1)[0]) if seed is not None else None
            base_sampler = optuna.samplers.TPESampler(seed=base_seed_int)
        self.base_sampler = base_sampler
        self._distributions = space.distributions(prefix)
        self._lineage: dict[int, Lineage] = {}
        # (study name, trial number) -> (trial id, genome, its string) of a trial that has ended
        self._ended: dict[tuple[str, int], tuple[int, Genome | None, str | None]] = {}
        self._lock = threading.Lock()

    # -- pickling: everything but the lock (the generator keeps its state)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        state["_ended"] = {}  # a cache, rebuilt from the study
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.setdefault("n_startup_trials", state.get("population_size", 20))  # pickled before the knobs
        state.setdefault("budget", None)  # pickled before the budget-aware start
        state.setdefault("candidates", 1)
        state.setdefault("skip_duplicates", False)
        state.setdefault("_ended", {})
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
                CellGenome.from_string(text) if isinstance(self.space, CellSpace) else LayerGenome.from_string(text)
            )
            self.space.validate(genome)  # type: ignore[arg-type]
        except ValueError:
            return None
        return genome

    def startup_trials(self, in_flight: int) -> int:
        """Finished trials needed before the first mutation, with ``in_flight`` other trials running."""
        if self.n_startup_trials != "auto":
            return self.n_startup_trials
        return min(self.population_size, max(4, math.ceil(in_flight / 8)))

    def startup_genomes(self) -> int:
        """Trials with a genome (in any state) needed before the first mutation: the budget's share."""
        if self.n_startup_trials != "auto" or self.budget is None:
            return 0
        return min(self.population_size, math.ceil(self.budget * START_SHARE))

    def _starting(self, finished: int, in_flight: int, genomes: int) -> bool:
        """Whether the next genome is still a random one (the start, see the module docstring)."""
        return finished < self.startup_trials(in_flight) or genomes < self.startup_genomes()

    # -- BaseSampler

    def reseed_rng(self) -> None:
        with self._lock:
            self._rng = np.random.default_rng()
        self.base_sampler.reseed_rng()

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        self._check_single_objective(study)
        return dict(self._distributions)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        self._check_single_objective(study)
        out: dict[str, Any] = {}
        if any(name in self._distributions for name in search_space):
            genome, lineage = self._next_genome(study, trial)
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

    def _genome(self, study: Study, trial: FrozenTrial) -> Genome | None:
        """:meth:`genome_of`, cached for trials that have ended."""
        return self._genome_and_text(study, trial)[0]

    def _genome_and_text(self, study: Study, trial: FrozenTrial) -> tuple[Genome | None, str | None]:
        if trial.state in _ACTIVE:
            genome = self.genome_of(trial)
            return genome, None if genome is None else genome.to_string()
        key = (study.study_name, trial.number)
        with self._lock:
            cached = self._ended.get(key)
        if cached is not None and cached[0] == op.frozen_id(study, trial):
            return cached[1], cached[2]
        genome = self.genome_of(trial)
        text = None if genome is None else genome.to_string()
        with self._lock:
            self._ended[key] = (op.frozen_id(study, trial), genome, text)
        return genome, text

    def _finished(self, study: Study, limit: int | None = None) -> list[tuple[FrozenTrial, Genome]]:
        """The completed trials with a genome, oldest completion first (the last ``limit`` of them)."""
        done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        done.sort(key=lambda t: (t.datetime_complete or datetime.datetime.min, t.number))
        out: list[tuple[FrozenTrial, Genome]] = []
        for t in reversed(done):
            genome = self._genome(study, t)
            if genome is not None:
                out.append((t, genome))
                if limit is not None and len(out) == limit:
                    break
        out.reverse()
        return out

    def _next_genome(self, study: Study, trial: FrozenTrial) -> tuple[Genome, Lineage]:
        others = [t for t in study.get_trials(deepcopy=False) if t.number != trial.number]
        in_flight = sum(t.state in _ACTIVE for t in others)
        finished = self._finished(study, limit=max(self.population_size, MODEL_WINDOW))
        seen: set[str] = set()
        genomes = 0
        if self.skip_duplicates or self.startup_genomes():
            for t in others:
                text = self._genome_and_text(study, t)[1]
                if text is not None:
                    seen.add(text)
                    genomes += 1
        if not self.skip_duplicates:
            seen.clear()
        population = finished[-self.population_size :]
        sign = -1.0 if study.direction == StudyDirection.MAXIMIZE else 1.0
        with self._lock:
            if self._starting(len(finished), in_flight, genomes):
                genome = self._draw(lambda: self.space.sample(self._rng), seen, 1)[0][0]
                return genome, Lineage(genome.to_string(), None, "random")
            size = min(self.sample_size, len(population))
            picks = self._rng.choice(len(population), size=size, replace=False)
            best = min(picks, key=lambda i: sign * float(population[i][0].value))  # type: ignore[arg-type]
            parent, parent_genome = population[int(best)]
            mutants, fresh = self._draw(
                lambda: mutate_with_kind(parent_genome, self.space, self._rng),  # type: ignore[type-var]
                seen,
                self.candidates,
            )
            if not fresh:  # every single mutation of the parent is taken: two steps away
                mutants, fresh = self._draw(lambda: self._two_steps(parent_genome), seen, self.candidates)
            child, kind = mutants[0]
            if len(mutants) > 1:
                score = self._model(finished, sign, draw=self._rng)
                child, kind = max(mutants, key=lambda m: score(m[0]))  # first of the best on a tie
        return child, Lineage(child.to_string(), parent.number, kind.value)

    def _draw(self, draw: Any, seen: set[str], n: int) -> tuple[list[Any], bool]:
        """Up to ``n`` draws whose genomes are new (not in ``seen``, not repeated), and whether any was.

        ``draw()`` returns a genome or a (genome, kind) pair. Without ``skip_duplicates``
        every draw counts; with it, at most :data:`MAX_DRAWS` draws are made, and if none
        was new the last one is returned (with False)."""
        if not self.skip_duplicates:
            return [draw() for _ in range(n)], True
        out: list[Any] = []
        taken: set[str] = set()
        last = None
        for _ in range(MAX_DRAWS):
            last = draw()
            genome = last[0] if isinstance(last, tuple) else last
            text = genome.to_string()
            if text in seen or text in taken:
                continue
            taken.add(text)
            out.append(last)
            if len(out) == n:
                break
        return (out, True) if out else ([last], False)

    def _two_steps(self, genome: Genome) -> tuple[Genome, Any]:
        """A mutant of a mutant of ``genome`` (the kind of the second mutation)."""
        middle, _ = mutate_with_kind(genome, self.space, self._rng)  # type: ignore[type-var]
        return mutate_with_kind(middle, self.space, self._rng)  # type: ignore[type-var]

    def _model(
        self, finished: list[tuple[FrozenTrial, Genome]], sign: float, draw: np.random.Generator | None = None
    ) -> Callable[[Genome], float]:
        """Rating of a genome by a ridge regression of the finished trials' ranks on one-hot params:
        its posterior mean, or with ``draw`` one draw from its posterior (Thompson sampling)."""
        features: dict[tuple[str, str], int] = {}  # (param, repr(value)) -> column, by first appearance
        rows = [[features.setdefault(key, len(features)) for key in self._one_hot(genome)] for _, genome in finished]
        design = np.zeros((len(rows), len(features)))
        for i, columns in enumerate(rows):
            design[i, columns] = 1.0
        target = _ranks([-sign * float(t.value) for t, _ in finished])  # type: ignore[arg-type]
        weights = _ridge(design, target, RIDGE) if draw is None else _ridge_draw(design, target, RIDGE, draw)

        def score(genome: Genome) -> float:
            return float(sum(weights[features[key]] for key in self._one_hot(genome) if key in features))

        return score

    def _one_hot(self, genome: Genome) -> list[tuple[str, str]]:
        """The (param, repr(value)) indicators that are 1 for ``genome``."""
        encoded = self.space.encode(genome, self.prefix)  # type: ignore[arg-type]
        return [(name, repr(value)) for name, value in encoded.items()]

    def _record(self, study: Study, trial: FrozenTrial, lineage: Lineage) -> None:
        with self._lock:
            self._lineage[trial.number] = lineage
        storage, trial_id = op.storage_of(study), op.frozen_id(study, trial)
        storage.set_trial_system_attr(trial_id, GENOME_ATTR, lineage.genome)
        storage.set_trial_system_attr(trial_id, PARENT_ATTR, lineage.parent)
        storage.set_trial_system_attr(trial_id, MUTATION_ATTR, lineage.mutation)


def _ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks of ``values`` scaled to [0, 1] (ties by order; 0.5 for a single value)."""
    if len(values) == 1:
        return np.array([0.5])
    order = np.argsort(np.asarray(values, dtype=float), kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values))
    return ranks / (len(values) - 1)


def _ridge(design: np.ndarray, target: np.ndarray, penalty: float) -> np.ndarray:
    """Coefficients of a ridge regression of ``target`` on ``design`` (both centred; no intercept)."""
    x = design - design.mean(axis=0)
    y = target - target.mean()
    return np.linalg.solve(x.T @ x + penalty * np.eye(x.shape[1]), x.T @ y)


def _ridge_draw(design: np.ndarray, target: np.ndarray, penalty: float, rng: np.random.Generator) -> np.ndarray:
    """One draw of the coefficients from the ridge regression's posterior, N(mean, s2 (X'X + penalty I)^-1).

    ``s2`` is the residual variance on the fit's residual degrees of freedom (n - tr(hat matrix)),
    at most the target's variance: with fewer trials than the fit's degrees of freedom the
    residuals say nothing, and the draw is as wide as the ranks themselves."""
    x = design - design.mean(axis=0)
    y = target - target.mean()
    covariance = np.linalg.inv(x.T @ x + penalty * np.eye(x.shape[1]))
    mean = covariance @ (x.T @ y)
    spread = float(np.mean(y**2))
    dof = len(y) - float(np.trace(x @ covariance @ x.T))
    s2 = spread if dof < 1.0 else min(spread, float(np.sum((y - x @ mean) ** 2)) / dof)
    chol = np.linalg.cholesky((covariance + covariance.T) / 2.0)
    return mean + math.sqrt(s2) * (chol @ rng.standard_normal(len(mean)))


def evolution_sampler_for(
    space: SearchSpace,
    seed: int,
    population_size: int = 20,
    sample_size: int | None = None,
    budget: int | None = None,
) -> RegularizedEvolutionSampler:
    """The evolution sampler (defaults as documented above) for the one architecture parameter of
    ``space``; TPE for the rest."""
    genomes = [p for p in space if isinstance(p, GenomeParam)]
    if len(genomes) != 1:
        raise ValueError(
            f"sampler 'evolution' needs exactly one architecture parameter "
            f"(type 'layers' or 'cell') in [space]; found {len(genomes)}"
        )
    return RegularizedEvolutionSampler(
        genomes[0].space,
        prefix=genomes[0].name,
        population_size=population_size,
        sample_size=sample_size,
        seed=seed,
        budget=budget,
    )
