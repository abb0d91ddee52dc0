"""The evolution sampler's "auto" start scales with the trial budget as well as the workers (issue 28.1)."""

from __future__ import annotations

import optuna
import pytest

from search.sampling.evolution import MUTATION_ATTR, RegularizedEvolutionSampler
from search.sampling.samplers import make_sampler, sampler_info
from spaces.genomes import CellSpace
from spaces.params import parse_space


def _kinds_one_worker(sampler: RegularizedEvolutionSampler, trials: int) -> list[str]:
    """Ask and tell ``trials`` trials one at a time (one worker); each trial's mutation kind."""
    study = optuna.create_study(direction="maximize", sampler=sampler)
    kinds = []
    for _ in range(trials):
        trial = study.ask()
        genome = sampler.suggest(trial)
        study.tell(trial, float(sum(len(op) for op in genome.edges)))
        kinds.append(study._storage.get_trial(trial._trial_id).system_attrs[MUTATION_ATTR])
    return kinds


@pytest.mark.parametrize(("budget", "random_first"), [(None, 4), (20, 4), (100, 10), (200, 20), (1000, 20)])
def test_one_worker_start_is_the_budgets_share(budget: int | None, random_first: int) -> None:
    """On one worker: ceil(budget / 10) random genomes (at least 4, at most the population), then mutants."""
    sampler = RegularizedEvolutionSampler(CellSpace(), population_size=20, seed=5, budget=budget)
    kinds = _kinds_one_worker(sampler, random_first + 3)
    assert kinds[:random_first] == ["random"] * random_first
    assert "random" not in kinds[random_first:], kinds


def test_many_workers_start_is_unchanged_by_the_budget() -> None:
    """64 asked before any finishes: the budget's 20 are long reached, so 8 finished trials decide."""
    sampler = RegularizedEvolutionSampler(CellSpace(), population_size=20, seed=3, budget=200)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    running = [(t := study.ask(), sampler.suggest(t)) for _ in range(64)]
    for trial, genome in running[:8]:
        study.tell(trial, float(len(genome.edges[0])))
    trial = study.ask()
    sampler.suggest(trial)
    assert study._storage.get_trial(trial._trial_id).system_attrs[MUTATION_ATTR] != "random"


def test_fixed_start_ignores_the_budget() -> None:
    sampler = RegularizedEvolutionSampler(CellSpace(), population_size=20, seed=1, n_startup_trials=6, budget=200)
    kinds = _kinds_one_worker(sampler, 8)
    assert kinds[:6] == ["random"] * 6 and "random" not in kinds[6:]


def test_budget_is_validated() -> None:
    with pytest.raises(ValueError, match="budget=0 must be an int >= 1"):
        RegularizedEvolutionSampler(CellSpace(), budget=0)


def test_registry_passes_the_campaign_budget_to_evolution_only() -> None:
    space = parse_space({"cell": {"type": "cell"}})
    sampler = make_sampler("evolution", space, 7, budget=150)
    assert isinstance(sampler, RegularizedEvolutionSampler) and sampler.budget == 150
    assert sampler.startup_genomes() == 15
    assert sampler_info("evolution").takes_budget and not sampler_info("tpe").takes_budget
    assert isinstance(make_sampler("tpe", space, 7, budget=150), optuna.samplers.TPESampler)
