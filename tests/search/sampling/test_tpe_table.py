"""The kept trial table: Optuna's split and internal values of every kind of trial, as the trials change."""

from __future__ import annotations

import json
import random

import numpy as np
import optuna
import pytest
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution
from optuna.samplers import TPESampler
from optuna.samplers._tpe.sampler import _RELATIVE_PARAMS_KEY, _split_trials, default_gamma
from optuna.trial import TrialState, create_trial

from search.sampling.tpe_table import TrialTable

SPACE: dict[str, BaseDistribution] = {"x": FloatDistribution(0.0, 1.0), "op": CategoricalDistribution(["a", "b", "c"])}
LIVE = (TrialState.RUNNING, TrialState.WAITING)


def _params(rng: random.Random) -> dict:
    return {"x": rng.choice([0.1, 0.5, 0.9]), "op": rng.choice("abc")}


def _add(study: optuna.Study, rng: random.Random) -> None:
    """One trial of a random kind: complete (values with ties), pruned (steps, none, a NaN), infeasible, running,
    waiting, failed, without the space's parameters, or running with only its sampler's proposal."""
    kind = rng.choice(["complete"] * 3 + ["pruned", "infeasible", "running", "waiting", "fail", "bare", "proposal"])
    params = _params(rng)
    if kind in ("complete", "infeasible", "bare"):
        attrs = {"constraints": [rng.choice([-1.0, 0.5, 2.0])]} if kind == "infeasible" else {}
        space = {} if kind == "bare" else SPACE
        study.add_trial(
            create_trial(
                params=params if space else {},
                distributions=space,
                value=float(rng.randint(0, 9)),
                system_attrs=attrs,
            )
        )
    elif kind == "pruned":
        steps = {s: rng.choice([float(rng.randint(0, 9)), float("nan")]) for s in range(rng.randint(0, 3))}
        study.add_trial(
            create_trial(params=params, distributions=SPACE, state=TrialState.PRUNED, intermediate_values=steps)
        )
    elif kind == "fail":
        study.add_trial(create_trial(params=params, distributions=SPACE, state=TrialState.FAIL))
    elif kind == "waiting":
        study.enqueue_trial(params)
    else:
        trial_id = study._storage.create_new_trial(study._study_id)
        if kind == "proposal":
            study._storage.set_trial_system_attr(trial_id, f"{_RELATIVE_PARAMS_KEY}:0", json.dumps(params))
        else:
            for name, value in params.items():
                study._storage.set_trial_param(trial_id, name, SPACE[name].to_internal_repr(value), SPACE[name])


def _move(study: optuna.Study, rng: random.Random) -> None:
    """Some live trials change: told, pruned, failed, started (a waiting one), or given their values."""
    storage = study._storage
    for trial in study.get_trials(deepcopy=False, states=LIVE):
        if rng.random() < 0.4:
            continue
        if trial.state == TrialState.WAITING:
            storage.set_trial_state_values(trial._trial_id, TrialState.RUNNING)
        elif not trial.params:  # a proposal: its values are set (another proposal first, sometimes)
            params = _params(rng)
            key = f"{_RELATIVE_PARAMS_KEY}:0"
            if rng.random() < 0.5:
                storage.set_trial_system_attr(trial._trial_id, key, json.dumps(params))
            else:
                for name, value in params.items():
                    storage.set_trial_param(trial._trial_id, name, SPACE[name].to_internal_repr(value), SPACE[name])
        else:
            end = rng.choice([TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL])
            if end == TrialState.PRUNED:
                storage.set_trial_intermediate_value(trial._trial_id, 3, float(rng.randint(0, 9)))
            storage.set_trial_state_values(
                trial._trial_id, end, [float(rng.randint(0, 9))] if end == TrialState.COMPLETE else None
            )


def _optunas(study: optuna.Study, asking: int, liar: bool, gamma) -> tuple[dict, dict]:  # type: ignore[no-untyped-def]
    states = (TrialState.COMPLETE, TrialState.PRUNED) + ((TrialState.RUNNING,) if liar else ())
    kept = [t for t in study._get_trials(deepcopy=False, states=states, use_cache=False) if t.number != asking]
    below, above = _split_trials(study, kept, gamma(sum(t.state != TrialState.RUNNING for t in kept)))
    tpe = TPESampler(multivariate=True)
    return tpe._get_internal_repr(below, SPACE, study), tpe._get_internal_repr(above, SPACE, study)


def _same(ours: dict, optunas: dict) -> bool:
    return all(np.array_equal(np.asarray(ours[n], dtype=float), np.asarray(optunas[n], dtype=float)) for n in SPACE)


@pytest.mark.parametrize("direction", ["minimize", "maximize"])
@pytest.mark.parametrize("seed", range(3))
def test_the_tables_split_is_optunas_as_trials_arrive_and_change(direction: str, seed: int) -> None:
    rng = random.Random(seed)
    study = optuna.create_study(direction=direction)
    tpe = TPESampler(multivariate=True)
    table = TrialTable(SPACE, direction == "maximize", lambda t: tpe._get_params(t, study))
    # 4/5 and 9/10: past the complete trials, into part of the pruned and then part of the infeasible ones
    gammas = [default_gamma, lambda n: 0, lambda n: n, lambda n: n + 5, lambda n: n // 3, lambda n: 4 * n // 5]
    gammas.append(lambda n: 9 * n // 10)
    for _round in range(6):
        for _ in range(rng.randint(5, 40)):
            _add(study, rng)
        _move(study, rng)
        assert table.update(study._get_trials(deepcopy=False, use_cache=False))
        running = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
        for asking in [-1, *running[-1:]]:
            for liar in (True, False):
                for gamma in gammas:
                    ours = table.split(asking if liar else -1, liar, gamma)
                    optunas = _optunas(study, asking if liar else -1, liar, gamma)
                    assert _same(ours[0], optunas[0]) and _same(ours[1], optunas[1]), (_round, asking, liar)
    kinds = {t.state for t in study.trials}
    assert {TrialState.PRUNED, TrialState.FAIL, TrialState.RUNNING, TrialState.COMPLETE} <= kinds


def test_a_study_the_table_cannot_follow_is_refused() -> None:
    two = optuna.create_study(directions=["minimize", "minimize"])
    two.add_trial(create_trial(params={"x": 0.5}, distributions={"x": SPACE["x"]}, values=[1.0, 2.0]))
    table = TrialTable(SPACE, False, lambda t: t.params)
    assert not table.update(two.trials)  # two values: Optuna ranks them by non-domination, not by value
    study = optuna.create_study()
    study.add_trial(create_trial(params={"x": 0.5}, distributions={"x": SPACE["x"]}, value=1.0))
    assert not TrialTable(SPACE, False, lambda t: t.params).update(study.trials * 2)  # not numbered by position
