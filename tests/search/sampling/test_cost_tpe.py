"""``sampler = "cost_tpe"`` (issue 52, point 4): TPE's l(x)/g(x) divided by the predicted cost to a cooled power."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState
from toy_specs import toy_toml

from cluster.sim_models import CurveModel
from cluster.simulated import SimulatedExecutor
from cluster.trial_cost import LogLinearLaw
from search.loop.campaign import Campaign
from search.reports.cost_value import best_against_cost, cost_curve, value_for_cost
from search.reports.data import load_campaign
from search.sampling.cost_tpe import (
    COST_KEY,
    CostTPESampler,
    cooled_exponent,
    cost_weighted,
    log_improvement,
    record_cost,
)
from search.sampling.process import Done, ReplaySampler, _Replica
from search.sampling.tpe import RefitTPESampler
from search.session.runner import load_study
from search.spec.campaign_spec import parse_spec
from search.store.folder import CampaignFolder
from search.store.records import TrialRecord


def test_the_acquisition_divides_the_ratio_by_the_cost_to_the_power_alpha() -> None:
    log_ratio = np.array([0.0, 0.5, 0.2])
    costs = np.array([1.0, 10.0, 0.0])  # the third: unknown, left as it is
    assert cost_weighted(log_ratio, costs, 1.0) == pytest.approx([0.0, 0.5 - np.log(10.0), 0.2])
    assert int(np.argmax(cost_weighted(log_ratio, costs, 1.0))) == 2
    assert int(np.argmax(cost_weighted(log_ratio[:2], costs[:2], 1.0))) == 0  # 10x the cost for e^0.5 the ratio
    assert int(np.argmax(cost_weighted(log_ratio[:2], costs[:2], 0.0))) == 1  # cooled down: TPE's pick


def test_the_expected_improvement_saturates_where_the_ratio_does_not() -> None:
    log_ratio = np.array([-2.0, 0.0, 3.0, 8.0])
    assert log_improvement(log_ratio, 0.0) == pytest.approx(log_ratio)  # gamma 0: the ratio itself
    ei = np.exp(log_improvement(log_ratio, 0.1))  # 1 / (gamma + (1 - gamma) g/l)
    assert ei == pytest.approx(1.0 / (0.1 + 0.9 * np.exp(-log_ratio)))
    assert np.all(np.diff(ei) > 0) and ei[-1] == pytest.approx(10.0, rel=1e-2)  # at most 1 / gamma
    costs = np.array([1.0, 1.0, 2.0, 8.0])
    assert int(np.argmax(cost_weighted(log_ratio, costs, 1.0))) == 3  # by the ratio: e^5 outweighs 4x the cost
    assert int(np.argmax(cost_weighted(log_improvement(log_ratio, 0.1), costs, 1.0))) == 2  # EI per unit cost
    with pytest.raises(ValueError, match="gamma must be in"):
        log_improvement(log_ratio, 1.0)


def test_the_exponent_cools_as_the_budget_is_spent() -> None:
    assert [cooled_exponent(2.0, used) for used in (-0.1, 0.0, 0.25, 1.0, 1.5)] == [2.0, 2.0, 1.5, 0.0, 0.0]


def _flat_study(costs: dict[str, float], n: int) -> optuna.Study:
    """Trials whose value grows with a float ``x`` and not with a label ``kind``, each with its recorded cost."""
    study = optuna.create_study(direction="maximize")
    dists = {"x": FloatDistribution(0.0, 1.0), "kind": CategoricalDistribution(list(costs))}
    rng = np.random.default_rng(0)
    for i in range(n):
        params = {"x": float(rng.uniform()), "kind": list(costs)[i % len(costs)]}
        cost = costs[params["kind"]] * (1.0 + 9.0 * params["x"])
        study.add_trial(
            optuna.trial.create_trial(
                state=TrialState.COMPLETE,
                value=params["x"] + float(rng.normal(0.0, 0.1)),
                params=params,
                distributions=dists,
                system_attrs={COST_KEY: cost},
            )
        )
    return study


@pytest.mark.parametrize("multivariate", [True, False])
def test_the_sampler_picks_the_cheaper_of_two_equally_good_labels(multivariate: bool) -> None:
    costs = {"small": 1.0, "big": 20.0}
    picks: dict[str, list[tuple[float, str]]] = {}
    for name, sampler in (
        ("tpe", RefitTPESampler(seed=3, multivariate=multivariate)),
        ("cost", CostTPESampler(seed=3, budget=10_000, multivariate=multivariate)),
    ):
        study = _flat_study(costs, 40)
        study.sampler = sampler
        for _ in range(40):
            trial = study.ask()
            picks.setdefault(name, []).append(
                (trial.suggest_float("x", 0.0, 1.0), trial.suggest_categorical("kind", list(costs)))
            )
            study.tell(trial, state=TrialState.FAIL)  # the model stays that of the 40 flat trials

    def mean_cost(p: list[tuple[float, str]]) -> float:
        return float(np.mean([costs[k] * (1.0 + 9.0 * x) for x, k in p]))

    small = {name: sum(k == "small" for _x, k in p) for name, p in picks.items()}
    assert small["cost"] >= 34 and small["tpe"] <= 30, small  # of 40: TPE picks either, the cost-aware the cheap one
    assert mean_cost(picks["cost"]) < 0.5 * mean_cost(picks["tpe"])


def test_an_all_categorical_space_is_weighed_too() -> None:
    costs = {"a": 1.0, "b": 4.0, "c": 16.0}
    study = optuna.create_study(direction="maximize")
    dists = {"op": CategoricalDistribution(list(costs))}
    for i in range(60):
        op_ = list(costs)[i % 3]
        study.add_trial(
            optuna.trial.create_trial(
                state=TrialState.COMPLETE,
                value=float(i % 5),
                params={"op": op_},
                distributions=dists,
                system_attrs={COST_KEY: costs[op_]},
            )
        )
    sampler = CostTPESampler(seed=1, budget=10_000, refit_fraction=0.05)  # 60 trials: a shared, tabulated fit
    study.sampler = sampler
    ops = []
    for _ in range(30):
        trial = study.ask()
        ops.append(trial.suggest_categorical("op", list(costs)))
        study.tell(trial, state=TrialState.FAIL)
    assert sampler.last_alpha == pytest.approx(1.0, abs=0.02)
    assert ops.count("a") > 2 * ops.count("c"), ops


OPS = ["a", "b", "c", "d"]


def _op_cost(params: dict) -> float:
    return 2.0 ** sum(params[f"p{j}"] == "b" for j in range(6))  # op "b" doubles the cost and adds nothing


def _ops_study(seed: int) -> tuple[optuna.Study, dict]:
    """60 trials of six ops, as a cell of NAS-Bench-201: the value counts the "a"s, each "b" doubles the cost."""
    study = optuna.create_study(direction="maximize")
    dists = {f"p{i}": CategoricalDistribution(OPS) for i in range(6)}
    rng = np.random.default_rng(seed)
    for _ in range(60):
        params = {f"p{j}": OPS[int(rng.integers(4))] for j in range(6)}
        value = sum(params[f"p{j}"] == "a" for j in range(6)) + float(rng.normal(0.0, 0.3))
        study.add_trial(
            optuna.trial.create_trial(
                state=TrialState.COMPLETE,
                value=value,
                params=params,
                distributions=dists,
                system_attrs={COST_KEY: _op_cost(params)},
            )
        )
    return study, dists


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_with_six_parameters_the_pick_avoids_an_op_that_costs_and_does_not_help() -> None:
    """Over six parameters l(x)/g(x) spans several nats among the candidates: divided by the cost it kept paying
    for the useless op about as often as TPE; TPE's expected improvement divided by the cost leaves it out."""
    mean_cost = {}
    for name in ("tpe", "cost"):
        costs = []
        for seed in range(4):
            study, dists = _ops_study(seed)
            study.sampler = (
                RefitTPESampler(seed=seed, multivariate=True)
                if name == "tpe"
                else CostTPESampler(seed=seed, budget=100_000, multivariate=True)
            )
            for _ in range(30):
                trial = study.ask(dists)
                costs.append(_op_cost(trial.params))
                study.tell(trial, state=TrialState.FAIL)  # the model stays that of the 60 trials
        mean_cost[name] = float(np.mean(costs))
    assert mean_cost["tpe"] > 1.5 and mean_cost["cost"] < 1.1, mean_cost


def test_the_running_trials_count_as_used_budget_for_the_cooling() -> None:
    """On many workers most of a budget is running before much of it has finished: 20 finished and 70 running of
    100 trials is 90% used (alpha 0.1), not 20% (alpha 0.8)."""
    study = _flat_study({"small": 1.0, "big": 20.0}, 20)
    sampler = CostTPESampler(seed=0, budget=100)
    study.sampler = sampler
    for _ in range(71):  # the last ask sees 70 running, asked and not told
        trial = study.ask()
        trial.suggest_float("x", 0.0, 1.0)
        trial.suggest_categorical("kind", ["small", "big"])
    assert sampler.last_alpha == pytest.approx(0.1)
    spent = 20 * 10.5 * 1.0  # about: the mean cost of the finished trials, per finished trial
    hours = CostTPESampler(seed=0, cost_hours=4 * spent / 3600.0)  # a slot-hours budget of about 4x what finished
    study.sampler = hours
    trial = study.ask()
    trial.suggest_float("x", 0.0, 1.0)
    trial.suggest_categorical("kind", ["small", "big"])
    assert hours.last_alpha < 0.2, hours.last_alpha  # the 71 running trials' predicted cost counts


def test_the_cost_reaches_a_replica_study_with_the_tell() -> None:
    dists = {"x": FloatDistribution(0.0, 1.0)}
    told: list[Done] = []
    controller = optuna.create_study(sampler=ReplaySampler(dists, told.append))
    trial = controller.ask()
    record_cost(trial, 12.5)  # as the campaign does before its tell
    controller.tell(trial, 1.0)
    assert told[0].cost == 12.5
    replica = _Replica(CostTPESampler(seed=0), ["minimize"], dists, [], None)
    replica.record(Done(None, TrialState.COMPLETE, [1.0], {"x": 0.5}, dists, {}, {}, 12.5))
    assert replica.study.trials[0].system_attrs[COST_KEY] == 12.5


SPACE = {
    "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
    "size": {"type": "int", "low": 1, "high": 64, "log": True},
}


def _campaign(tmp_path: Path, sampler: str) -> Campaign:
    text = toy_toml(sampler, 60, 4, seed=5, space=SPACE, metric="accuracy", sampler=sampler)
    spec = parse_spec(tomllib.loads(text), f"{sampler}.toml", text, check_trainer=False)  # simulated: no trainer
    folder = CampaignFolder(tmp_path / sampler)
    folder.create(text)
    law = LogLinearLaw.power(1e-3, size=1.0)  # an epoch of 1,000 examples: 1 s per unit of size
    model = CurveModel(seed=2, optimum={"lr": 0.01, "size": 8.0}, jitter=0.1, per_example=law)
    executor = SimulatedExecutor(4, model, controller_time_scale=0)
    return Campaign(spec, folder, load_study(spec, folder, create=True), executor, clock=executor.clock)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_cost_aware_campaign_spends_less_per_trial_on_a_trainer_whose_time_grows_with_a_parameter(
    tmp_path: Path,
) -> None:
    spent = {}
    for sampler in ("tpe", "cost_tpe"):
        run = _campaign(tmp_path, sampler)
        run.run()
        finished = [t for t in run.study.trials if t.state == TrialState.COMPLETE]
        assert len(finished) == 60
        spent[sampler] = run.costs.spent
        recorded = [t.system_attrs.get(COST_KEY) for t in finished]
        assert (sampler == "cost_tpe") == all(c is not None and c > 0 for c in recorded)
    assert spent["cost_tpe"] < 0.8 * spent["tpe"], spent
    section = best_against_cost(load_campaign(tmp_path / "cost_tpe"))  # the report's view of value against cost
    assert section.shown and "best value against cost" in section.html
    assert "| 100% |" in section.md and "slot-hours" in section.md


def _record(number: int, finished: float, seconds: float, value: float | None, width: int = 1) -> TrialRecord:
    state = TrialState.COMPLETE if value is not None else TrialState.FAIL
    values = (value,) if value is not None else None
    return TrialRecord(number, state, {}, values, finished=finished, duration=seconds, width=width)


def test_the_cost_curve_adds_every_trial_s_slot_seconds_in_the_order_they_ended() -> None:
    records = [_record(0, 30.0, 10.0, 0.5), _record(1, 10.0, 5.0, None, width=2), _record(2, 40.0, 20.0, 0.7)]
    curve = cost_curve(records, maximize=True)
    assert curve == [(20.0, 0.5), (40.0, 0.7)]  # the failed trial's 10 slot-seconds count, it adds no point
    assert cost_curve(records, maximize=False) == [(20.0, 0.5), (40.0, 0.5)]
    assert value_for_cost(curve, 19.0) is None and value_for_cost(curve, 39.0) == 0.5


def test_a_wrong_option_is_one_line_naming_the_value_and_the_rule() -> None:
    from search.spec.component_check import check_components
    from search.spec.table import SpecError

    text = toy_toml("bad", 5, 2, sampler="cost_tpe", top={"sampler": {"cost_exponent": -1}})
    spec = parse_spec(tomllib.loads(text), "bad.toml", text, check_trainer=False)
    with pytest.raises(SpecError, match=r"^bad.toml: sampler: cost_exponent must be a number >= 0, got -1$"):
        check_components(spec)
