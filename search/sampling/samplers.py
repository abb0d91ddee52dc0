"""The sampler registry: every sampler name a spec may give, and what the rest of the code needs to know of it.

One :class:`SamplerInfo` per name says how to build the sampler (seeded from the
study seed), whether it can sample on a replica study in a child process
(``replica_safe``, see :mod:`search.sampling.process`) and what it needs of the
search space (``check_space``). Spec validation, :func:`make_sampler` and the
campaign's choice of where to sample all read :data:`SAMPLER_REGISTRY`: adding a built-in
sampler is one entry there. A spec may also name any class (``"pkg.mod:Class"``, built with
``[sampler]``'s keyword arguments) and ``search.run`` takes any Optuna sampler object
(:mod:`search.sampling.components`); such a sampler runs in a child process if it pickles.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.samplers import BaseSampler

from search.compat import optuna_private as op
from search.sampling import components
from search.sampling.random_draws import RandomDraws
from search.sampling.seeds import component_seed
from search.vocab.registry import Registry
from search.vocab.terms import SamplingMode
from spaces.errors import InputError
from spaces.params import SearchSpace

__all__ = [
    "SamplerInfo",
    "SAMPLER_REGISTRY",
    "SAMPLERS",
    "REPLICA_SAFE",
    "CONSTRAINED",
    "SAMPLING",
    "sampler_info",
    "runs_in_process",
    "reads_cost",
    "space_problem",
    "sampling_problem",
    "make_sampler",
    "grid_of",
    "AskTellGridSampler",
]

# (search space, number of objectives) -> (the spec key at fault, the problem) or None when the space suits it
SpaceCheck = Callable[[SearchSpace, int], "tuple[str, str] | None"]


@dataclasses.dataclass(frozen=True)
class SamplerInfo:
    """A sampler a spec may name: ``build(space, seed, **options)`` (``options``: the spec's ``[sampler]``
    table), whether it may run on a replica study in a child process, and ``check_space(space,
    n_objectives)``, which names what it cannot work with.

    ``supports_constraints``: it reads the trials' constraint values (``[study] constraints``, set
    with ``Trial.set_constraint`` before each tell) and prefers feasible trials.
    """

    name: str
    build: Callable[..., BaseSampler]
    replica_safe: bool = False
    check_space: SpaceCheck | None = None
    supports_constraints: bool = False
    description: str = ""
    """One line on the sampler, for the docs (the registry refuses an entry without one)."""
    takes_budget: bool = False
    """``build(..., budget=[study] n_trials)``: its start scales with the campaign's trial budget."""
    reads_cost: bool = False
    """It reads each finished trial's slot-seconds, which the campaign then records on it
    (:data:`search.sampling.cost_tpe.COST_KEY`)."""


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

    def after_trial(self, study, trial, state, values) -> None:
        return None


def _evolution(space: SearchSpace, seed: int, budget: int | None = None, **options: Any) -> BaseSampler:
    from search.sampling.evolution import evolution_sampler_for

    if options:
        raise InputError(f"'evolution' takes no [sampler] options (got {', '.join(options)}); see [space] genomes")
    return evolution_sampler_for(space, seed, budget=budget)


def _tpe(space: SearchSpace, seed: int, **options: Any) -> BaseSampler:
    if not op.uses("samplers"):  # Optuna's TPE internals moved: its own TPESampler (refits every ask)
        options.pop("refit_fraction", None)
        return optuna.samplers.TPESampler(seed=seed, **options)
    from search.sampling.tpe import RefitTPESampler

    return RefitTPESampler(seed=seed, **options)


def _cost_tpe(space: SearchSpace, seed: int, budget: int | None = None, **options: Any) -> BaseSampler:
    from search.sampling.cost_tpe import CostTPESampler

    return CostTPESampler(seed=seed, budget=budget, **options)


def _single_objective(space: SearchSpace, n_objectives: int) -> tuple[str, str] | None:
    if n_objectives > 1:
        return ("study.sampler", "'cost_tpe' is single-objective; use 'tpe' or 'nsga2' for several objectives")
    return None


def _random(space: SearchSpace, seed: int, **options: Any) -> BaseSampler:
    if not op.uses("samplers"):  # Optuna's own RandomSampler: the same draws, slower
        return optuna.samplers.RandomSampler(seed=seed, **options)
    return RandomDraws(seed=seed, **options)


def _grid_space(space: SearchSpace, n_objectives: int) -> tuple[str, str] | None:
    if space.conditional:
        name = space.conditional[0]
        return (
            f"space.{name}.when",
            "the grid sampler needs every parameter in every trial; "
            "remove the condition or use another sampler (tpe handles conditional parameters)",
        )
    for name, dist in space.distributions().items():
        if not isinstance(dist, (CategoricalDistribution, IntDistribution)):
            return (
                f"space.{name}",
                "the grid sampler needs discrete parameters (int, categorical, batch_size); this one is continuous",
            )
    return None


def _evolution_space(space: SearchSpace, n_objectives: int) -> tuple[str, str] | None:
    from spaces.architecture import GenomeParam

    genomes = [p.name for p in space if isinstance(p, GenomeParam)]
    if len(genomes) != 1:
        return (
            "study.sampler",
            "'evolution' needs exactly one architecture parameter (type 'layers' or 'cell') "
            f"in [space], found {len(genomes)}",
        )
    if n_objectives > 1:
        return ("study.sampler", "'evolution' is single-objective; use 'nsga2' for several objectives")
    return None


_BUILT_IN = (
    SamplerInfo(
        "tpe",
        _tpe,
        replica_safe=True,
        supports_constraints=True,
        description="Tree-structured Parzen Estimator (Optuna's default; refitted once the study grows by 0.5%)",
    ),
    SamplerInfo(
        "random",
        _random,
        description="independent uniform draws; the baseline",
    ),
    SamplerInfo(
        "cmaes",
        lambda space, seed, **kw: optuna.samplers.CmaEsSampler(seed=seed, **{"warn_independent_sampling": False, **kw}),
        description="CMA evolution strategy over the continuous parameters",
    ),
    SamplerInfo(
        "gp",
        lambda space, seed, **kw: optuna.samplers.GPSampler(  # conditional params: random, quietly
            seed=seed, **{"warn_independent_sampling": not space.conditional, **kw}
        ),
        replica_safe=True,
        supports_constraints=True,
        description="Gaussian-process Bayesian optimisation",
    ),
    SamplerInfo(
        "qmc",
        lambda space, seed, **kw: optuna.samplers.QMCSampler(seed=seed, **{"warn_independent_sampling": False, **kw}),
        description="quasi-Monte Carlo (Sobol) points that cover the space evenly",
    ),
    SamplerInfo(
        "grid",
        lambda space, seed, **kw: AskTellGridSampler(grid_of(space.distributions()), seed=seed, **kw),
        check_space=_grid_space,
        description="every combination of the discrete parameters",
    ),
    SamplerInfo(
        "nsga2",
        lambda space, seed, **kw: optuna.samplers.NSGAIISampler(seed=seed, **kw),
        supports_constraints=True,  # one objective works too
        description="NSGA-II genetic algorithm, for one or several objectives",
    ),
    SamplerInfo(
        "evolution",
        _evolution,
        check_space=_evolution_space,
        takes_budget=True,
        description="regularized (aging) evolution over one architecture parameter",
    ),
    SamplerInfo(
        "cost_tpe",
        _cost_tpe,
        replica_safe=True,
        check_space=_single_objective,
        takes_budget=True,
        reads_cost=True,
        description="TPE whose pick divides its expected improvement by the trial model's predicted cost to a "
        "power cooled as the budget is spent (docs/howto/budgets.md)",
    ),
)
SAMPLER_REGISTRY: Registry[SamplerInfo] = Registry(
    "sampler", lambda name, names: f"sampler {name!r} is not one of {', '.join(names)}, nor a 'package.module:Class'"
)
for _info in _BUILT_IN:
    SAMPLER_REGISTRY.add(_info.name, _info, _info.description)
SAMPLERS = tuple(SAMPLER_REGISTRY)  # every name a spec may give, in the order the docs list them
REPLICA_SAFE = tuple(name for name, info in SAMPLER_REGISTRY.items() if info.replica_safe)
CONSTRAINED = tuple(name for name, info in SAMPLER_REGISTRY.items() if info.supports_constraints)
SAMPLING = tuple(SamplingMode)  # where the sampler runs (see search.sampling.process)


def sampler_info(name: str) -> SamplerInfo:
    """The registry entry of ``name`` (a ``module:Class`` entry gets one of its own); ``UnknownName`` otherwise."""
    if components.is_entry(name):
        return _user_sampler(name)
    return SAMPLER_REGISTRY.get(name)


def _user_sampler(entry: str) -> SamplerInfo:
    """A class the spec names, or an object passed to ``search.run``: it runs in a child process if it pickles
    (else on a thread, see ``search.loop.supply``), and may read ``[study] constraints``."""

    def build(space: SearchSpace, seed: int, **options: Any) -> BaseSampler:
        return components.build("sampler", entry, options, seed)

    return SamplerInfo(entry, build, replica_safe=True, supports_constraints=True, description="a user's class")


def reads_cost(name: str) -> bool:
    """Whether sampler ``name`` reads each finished trial's recorded slot-seconds (``reads_cost``)."""
    return sampler_info(name).reads_cost


def runs_in_process(name: str) -> bool:
    """Whether ``sampling = "auto"`` puts sampler ``name`` in a child process (if it pickles)."""
    return sampler_info(name).replica_safe


def space_problem(name: str, space: SearchSpace, n_objectives: int) -> tuple[str, str] | None:
    """What sampler ``name`` cannot work with in ``space``, as (spec key, problem); None if nothing."""
    check = sampler_info(name).check_space
    return check(space, n_objectives) if check else None


def sampling_problem(sampling: str, sampler: str, ordered: bool) -> str:
    """Why ``sampling`` cannot be used ("" if it can): an ordered campaign (deterministic, PBT, virtual
    time) samples in order on the loop, and only ``REPLICA_SAFE`` samplers run on a replica study."""
    if sampling not in SAMPLING:
        return f"{sampling!r} is not one of {', '.join(SAMPLING)}"
    if ordered and sampling in (SamplingMode.PROCESS, SamplingMode.THREAD):
        return (
            f"{sampling!r}: a deterministic, population-based or simulated campaign samples in order "
            "on the loop; use 'auto' or 'inline'"
        )
    if sampling == SamplingMode.PROCESS and not runs_in_process(sampler):
        return (
            f"'process' runs only {', '.join(REPLICA_SAFE)} (or a sampler class) on a replica study; "
            f"{sampler!r} keeps state in the study, use 'thread'"
        )
    return ""


def make_sampler(
    name: str,
    space: SearchSpace,
    study_seed: int,
    options: Mapping[str, Any] | None = None,
    budget: int | None = None,
) -> BaseSampler:
    """The sampler ``name``, seeded from the study seed; ``options``: the spec's ``[sampler]`` keyword arguments;
    ``budget``: the campaign's trial budget, for a sampler whose start scales with it (``takes_budget``)."""
    info = sampler_info(name)
    extra = {"budget": budget} if info.takes_budget else {}
    try:
        return info.build(space, component_seed(study_seed, "sampler"), **extra, **dict(options or {}))
    except TypeError as exc:  # a keyword the built-in sampler does not take
        raise InputError(f"sampler {name!r} with [sampler] {dict(options or {})}: {exc}") from None
