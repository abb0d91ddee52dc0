"""The evolution sampler's candidate choice at one worker: a draw from the candidate model's
posterior (Thompson sampling) rather than its point estimate, and no repeated genome."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
from test_evolution import _rated_study, cell_fitness, genomes

from search.sampling.evolution import RegularizedEvolutionSampler, _ridge, _ridge_draw
from spaces.genomes import CellSpace
from spaces.mutations import mutate

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _additive(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One-hot rows of ``n`` random 3-feature-group samples and a noisy additive target."""
    design = np.zeros((n, 9))
    design[np.arange(n)[:, None], 3 * np.arange(3) + rng.integers(3, size=(n, 3))] = 1.0
    return design, design @ np.tile([0.0, 0.2, 0.4], 3) + 0.05 * rng.standard_normal(n)


def test_posterior_draws_centre_on_the_ridge_fit_and_narrow_with_data() -> None:
    spreads = []
    for n in (15, 300):
        design, target = _additive(n, np.random.default_rng(n))
        draws = np.array([_ridge_draw(design, target, 1.0, np.random.default_rng(s)) for s in range(400)])
        assert draws.mean(axis=0) == pytest.approx(_ridge(design, target, 1.0), abs=4 * draws.std(axis=0).max() / 20)
        contrasts = draws.reshape(len(draws), 3, 3) - draws.reshape(len(draws), 3, 3)[:, :, :1]  # vs value 0
        spreads.append(float(contrasts[:, :, 1:].std(axis=0).mean()))  # what ranks genomes (not a group's shift)
    assert spreads[1] < spreads[0] / 3  # ~ 1/sqrt(n): 20x the data, a much narrower draw


def _choices(finished: int, seed: int) -> set[str]:
    """The child each of 40 posterior draws picks among the same 16 mutants of the best cell."""
    space, rng = CellSpace(), np.random.default_rng(seed)
    cells = [space.sample(rng) for _ in range(finished)]
    study = _rated_study(cells, [cell_fitness(c) for c in cells])
    sampler = RegularizedEvolutionSampler(space, seed=seed)
    parent = max(cells, key=cell_fitness)
    mutants = list({m.to_string(): m for m in (mutate(parent, space, rng) for _ in range(40))}.values())[:16]
    picks = set()
    for draw in range(40):
        score = sampler._model(sampler._finished(study), -1.0, draw=np.random.default_rng(draw))
        picks.add(max(mutants, key=score).to_string())
    return picks


@pytest.mark.slow
def test_few_results_spread_the_children_and_many_concentrate_them() -> None:
    few = [len(_choices(8, seed)) for seed in range(3)]
    many = [len(_choices(400, seed)) for seed in range(3)]
    assert min(few) >= 3  # 8 trials cannot tell most mutants apart: the draws differ
    assert max(many) <= 2 and sum(many) < sum(few)  # 400 trials of an additive fitness can


@pytest.mark.slow
def test_one_worker_never_repeats_a_genome() -> None:
    """Sequential asks (one worker, every result known before the next ask), 200 trials: no genome twice."""
    for seed in range(2):
        sampler = RegularizedEvolutionSampler(CellSpace(), seed=seed, budget=200)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        study.optimize(lambda t, s=sampler: cell_fitness(s.suggest(t)), n_trials=200)  # type: ignore[misc]
        assert len(set(genomes(study))) == 200
