"""The refit's one-pass split of the trials: Optuna's ``_split_trials``, list for list."""

from __future__ import annotations

import random

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.samplers._tpe.sampler import _split_trials, default_gamma
from optuna.trial import FrozenTrial, TrialState, create_trial

from search.sampling.tpe_split import split_for_refit

SPACE = {"x": FloatDistribution(0.0, 1.0)}


def _study(directions: list[str], n: int, seed: int) -> tuple[optuna.Study, list[FrozenTrial]]:
    """Complete, pruned (with and without steps, a NaN), running and infeasible trials, values with ties; no pruned
    ones with several objectives (Optuna prunes single-objective studies only)."""
    rng = random.Random(seed)
    study = optuna.create_study(directions=directions)
    kinds = ["complete", "complete", "running", "infeasible"] + (["pruned"] if len(directions) == 1 else [])
    for k in range(n):
        kind = rng.choice(kinds)
        values = [float(rng.randint(0, 20)) for _ in directions]
        attrs = {"constraints": [rng.choice([-1.0, 0.5, 2.0]), -1.0]} if kind == "infeasible" else {}
        if kind in ("complete", "infeasible"):
            trial = create_trial(params={"x": 0.5}, distributions=SPACE, values=values, system_attrs=attrs)
        elif kind == "pruned":
            steps = {s: rng.choice([float(rng.randint(0, 9)), float("nan")]) for s in range(rng.randint(0, 3))}
            trial = create_trial(
                params={"x": 0.5}, distributions=SPACE, state=TrialState.PRUNED, intermediate_values=steps
            )
        else:
            trial = create_trial(params={"x": 0.5}, distributions=SPACE, state=TrialState.RUNNING)
        study.add_trial(trial)
        assert study.trials[-1].number == k
    states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
    return study, study._get_trials(deepcopy=False, states=states)


def _optunas(study: optuna.Study, trials: list[FrozenTrial], asking: int, gamma) -> tuple[list[int], list[int]]:  # type: ignore[no-untyped-def]
    kept = [t for t in trials if t.number != asking]
    n = sum(t.state != TrialState.RUNNING for t in kept)
    below, above = _split_trials(study, kept, gamma(n))
    return [t.number for t in below], [t.number for t in above]


@pytest.mark.parametrize("directions", [["minimize"], ["maximize"], ["minimize", "maximize"]])
@pytest.mark.parametrize("seed", range(4))
def test_the_split_is_optunas_for_every_kind_of_trial_and_direction(directions: list[str], seed: int) -> None:
    study, trials = _study(directions, 120, seed)
    scores: dict[int, float] = {}
    gammas = [default_gamma, lambda n: 0, lambda n: n, lambda n: n + 5, lambda n: n // 3]
    for asking in (-1, trials[-1].number, trials[len(trials) // 2].number):
        for gamma in gammas:
            below, above = split_for_refit(study, trials, asking, gamma, scores)
            assert ([t.number for t in below], [t.number for t in above]) == _optunas(study, trials, asking, gamma)
    finished = {t.number for t in trials if t.state != TrialState.RUNNING}
    assert set(scores) == finished  # a score kept per finished trial, none for a running one
    assert any(score > 0 for score in scores.values())  # the infeasible ones were scored as such


def test_trials_out_of_number_order_come_back_in_optunas_order() -> None:
    study, trials = _study(["minimize"], 60, 9)
    shuffled = list(trials)
    random.Random(1).shuffle(shuffled)
    below, above = split_for_refit(study, shuffled, -1, default_gamma, {})
    assert ([t.number for t in below], [t.number for t in above]) == _optunas(study, shuffled, -1, default_gamma)


def test_a_trial_a_refit_cannot_model_is_refused() -> None:
    study = optuna.create_study()
    study.add_trial(create_trial(params={"x": 0.5}, distributions=SPACE, state=TrialState.FAIL))
    with pytest.raises(ValueError, match="trial 0 is FAIL"):
        split_for_refit(study, study.trials, -1, default_gamma, {})
