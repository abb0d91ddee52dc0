"""cost_tpe's options (issue 52, point 4): the competitive pick, the ridge cost model, the cooling by what is spent."""

from __future__ import annotations

import itertools

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState
from scipy.stats import spearmanr

from cluster.trial_cost import ONE_SLOT, Quantity, TrialCostModel
from search.sampling.cost_ridge import RidgeCost
from search.sampling.cost_tpe import COST_KEY, CostTPESampler, competitive_pick, cost_weighted

OPS = ("none", "skip", "conv1", "conv3", "pool")
SECONDS = {"none": 0.0, "skip": 10.0, "conv1": 120.0, "conv3": 400.0, "pool": 30.0}  # per edge, as NAS-Bench-201's


def _cell_cost(cell: dict[str, str]) -> float:
    return 700.0 + sum(SECONDS[op] for op in cell.values())


def test_the_competitive_pick_weighs_the_cost_only_among_candidates_near_tpe_s_best() -> None:
    log_ratio = np.array([3.0, 2.6, 0.5, -4.0])
    costs = np.array([4.0, 2.0, 1.0, 0.001])
    assert int(np.argmax(cost_weighted(log_ratio, costs, 1.0))) == 3  # per cost alone: the cheap and hopeless one
    assert competitive_pick(log_ratio, costs, 1.0, margin=1.0) == 1  # within 1 nat of the best: half the cost
    assert competitive_pick(log_ratio, costs, 1.0, margin=0.2) == 0  # only the best is competitive
    assert competitive_pick(log_ratio, costs, 0.0, margin=10.0) == 0  # cooled down: TPE's pick


def test_the_ridge_ranks_the_cells_costs_after_a_few_trials_where_the_trial_model_cannot_yet() -> None:
    """Six ops of five choices: the trial model has too few points for its fit below 34 trials and falls back on
    the nearest cells; at 25 the ridge ranks the 15,625 cells' costs far better."""
    rng = np.random.default_rng(0)
    cells = [dict(zip((f"Op{i}" for i in range(6)), ops)) for ops in itertools.product(OPS, repeat=6)]
    truth = np.array([_cell_cost(c) for c in cells])
    seen = [cells[i] for i in rng.choice(len(cells), 25, replace=False)]
    costs = [_cell_cost(c) * float(rng.lognormal(0.0, 0.05)) for c in seen]
    test = rng.choice(len(cells), 1000, replace=False)
    ridge = RidgeCost(list(zip(seen, costs))).predict([cells[i] for i in test])
    model = TrialCostModel()
    for number, (cell, cost) in enumerate(zip(seen, costs)):
        model.observe_run(number, cell, ONE_SLOT, cost, full=True)
    nearest = [model.predict(Quantity.RUN, cells[i]).mean for i in test]
    assert spearmanr(ridge, truth[test])[0] > 0.75
    assert spearmanr(nearest, truth[test])[0] < 0.6  # what cost_model = "trial" ranks with at 25 trials
    assert RidgeCost([]).predict([cells[0]]).tolist() == [0.0]  # nothing seen: unknown


@pytest.mark.parametrize(
    ("option", "value", "rule"),
    [
        ("cost_pick", "cheapest", "cost_pick must be one of ei, competitive, got 'cheapest'"),
        ("cost_model", "gp", "cost_model must be one of trial, ridge, got 'gp'"),
        ("cost_cooling", "later", "cost_cooling must be one of committed, spent, got 'later'"),
        ("cost_margin", -1.0, "cost_margin must be a number >= 0, got -1.0"),
    ],
)
def test_an_unknown_option_value_names_the_value_and_the_rule(option: str, value: object, rule: str) -> None:
    with pytest.raises(ValueError, match=f"^{rule}$"):
        CostTPESampler(**{option: value})


def _cells_study(n: int, seed: int = 0) -> tuple[optuna.Study, dict[str, CategoricalDistribution]]:
    """``n`` finished trials of six ops, each with its recorded cost (value: the count of conv3s, noisy)."""
    study = optuna.create_study(direction="maximize")
    dists = {f"Op{i}": CategoricalDistribution(list(OPS)) for i in range(6)}
    rng = np.random.default_rng(seed)
    for _ in range(n):
        cell = {f"Op{i}": OPS[int(rng.integers(len(OPS)))] for i in range(6)}
        study.add_trial(
            optuna.trial.create_trial(
                state=TrialState.COMPLETE,
                value=sum(op == "conv3" for op in cell.values()) + float(rng.normal(0.0, 0.3)),
                params=cell,
                distributions=dists,
                system_attrs={COST_KEY: _cell_cost(cell)},
            )
        )
    return study, dists


def test_with_cost_model_ridge_the_sampler_predicts_by_the_ridge_fit() -> None:
    study, dists = _cells_study(20)
    sampler = CostTPESampler(seed=0, budget=1000, cost_model="ridge")
    study.sampler = sampler
    study.ask(dists)
    cells = [{f"Op{i}": op for i in range(6)} for op in OPS]
    seen = [(t.params, t.system_attrs[COST_KEY]) for t in study.trials if t.state == TrialState.COMPLETE]
    assert sampler.predicted_costs(cells) == pytest.approx(RidgeCost(seen).predict(cells))
    predicted = dict(zip(OPS, sampler.predicted_costs(cells)))
    assert max(predicted, key=predicted.__getitem__) == "conv3" and predicted["conv3"] > 2 * predicted["none"]


@pytest.mark.parametrize(("cooling", "alpha"), [("committed", 0.1), ("spent", 0.8)])
def test_the_cooling_counts_the_running_trials_or_only_what_has_ended(cooling: str, alpha: float) -> None:
    """20 finished and 70 running of a budget of 100 trials: 90% committed, 20% spent."""
    study, dists = _cells_study(20)
    sampler = CostTPESampler(seed=0, budget=100, cost_cooling=cooling)
    study.sampler = sampler
    for _ in range(71):  # the last ask sees 70 running, asked and not told
        study.ask(dists)
    assert sampler.last_alpha == pytest.approx(alpha)
