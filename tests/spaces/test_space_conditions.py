"""Conditions users write: comparisons in ``when``, and Optuna's ``n_units_l{i}`` loop as one repeated entry."""

from __future__ import annotations

import optuna
import pytest

from spaces.errors import SpaceError
from spaces.params import parse_space

LOOP = {
    "n_layers": {"type": "int", "low": 1, "high": 3},
    "n_units_l{i}": {"type": "int", "low": 4, "high": 128, "log": True, "repeat": "n_layers"},
    "extra": {"type": "float", "low": 0.0, "high": 1.0, "when": {"n_layers": {">=": 3}}},
    "window": {"type": "int", "low": 1, "high": 4, "when": {"n_layers": {">": 1, "<=": 2}}},
}


def test_a_repeated_entry_is_one_parameter_per_layer_as_optunas_loop_suggests() -> None:
    space = parse_space(LOOP)
    assert space.names == ("n_layers", "n_units_l0", "n_units_l1", "n_units_l2", "extra", "window")
    assert list(space.base_distributions()) == ["n_layers", "n_units_l0"]  # every trial has one layer at least
    assert space["n_units_l2"].condition() == "n_layers > 2"
    assert space["window"].condition() == "n_layers > 1 and n_layers <= 2"


def test_sampled_trials_have_exactly_the_parameters_of_the_define_by_run_loop() -> None:
    space = parse_space(LOOP)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen = set()
    for _ in range(30):
        trial = study.ask(fixed_distributions=space.base_distributions())
        space.suggest(trial)
        n = trial.params["n_layers"]
        expected = {"n_layers", *(f"n_units_l{i}" for i in range(n))} | ({"extra"} if n >= 3 else set())
        assert set(trial.params) == expected | ({"window"} if n == 2 else set())
        assert space.complete(trial.params).keys() == set(trial.params)
        study.tell(trial, float(n))
        seen.add(n)
    assert seen == {1, 2, 3}


def test_comparisons_hold_for_numbers_only_and_equality_for_any_value() -> None:
    space = parse_space(
        {
            "model": {"type": "categorical", "choices": ["mlp", "cnn"]},
            "depth": {"type": "categorical", "choices": [1, 2, 4]},
            "wide": {"type": "float", "low": 0.0, "high": 1.0, "when": {"model": {"!=": "cnn"}, "depth": {"<": 4}}},
        }
    )
    wide = space["wide"]
    assert wide.holds({"model": "mlp", "depth": 2}) and not wide.holds({"model": "mlp", "depth": 4})
    assert not wide.holds({"model": "cnn", "depth": 1})


@pytest.mark.parametrize(
    ("table", "key", "words"),
    [
        ({"b": {"type": "float", "low": 0, "high": 1, "when": {"a": {">": 5}}}}, "b.when.a", "never holds"),
        ({"b": {"type": "float", "low": 0, "high": 1, "when": {"a": {"~": 5}}}}, "b.when.a", "not a comparison"),
        ({"b": {"type": "float", "low": 0, "high": 1, "when": {"a": {">": "x"}}}}, "b.when.a", "compares numbers"),
        ({"b_{i}": {"type": "float", "low": 0, "high": 1}}, "b_{i}", "repeat"),
        ({"b": {"type": "float", "low": 0, "high": 1, "repeat": "a"}}, "b", "{i}"),
        ({"b_{i}": {"type": "float", "low": 0, "high": 1, "repeat": "c"}}, "b_{i}.repeat", "another parameter"),
        ({"c": 0.5, "b_{i}": {"type": "float", "low": 0, "high": 1, "repeat": "c"}}, "b_{i}.repeat", "counts"),
    ],
)
def test_a_wrong_condition_is_one_line_naming_the_key(table: dict, key: str, words: str) -> None:
    with pytest.raises(SpaceError) as caught:
        parse_space({"a": {"type": "int", "low": 1, "high": 3}, **table})
    assert caught.value.key == key and words in caught.value.problem


def test_a_range_may_end_at_another_parameters_value() -> None:
    space = parse_space(
        {
            "max_kernel": {"type": "int", "low": 2, "high": 6},
            "kernel": {"type": "int", "low": 1, "high": "max_kernel"},
            "lr": {"type": "float", "low": 1e-3, "high": 0.1, "log": True},
        }
    )
    assert space.order.index("kernel") > space.order.index("max_kernel")
    assert list(space.base_distributions()) == ["max_kernel", "lr"]
    assert space.distributions()["kernel"] == optuna.distributions.IntDistribution(1, 6)  # the widest
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=5))
    for _ in range(25):
        trial = study.ask(fixed_distributions=space.base_distributions())
        space.suggest(trial)
        assert 1 <= trial.params["kernel"] <= trial.params["max_kernel"]
        assert trial.distributions["kernel"].high == trial.params["max_kernel"]
        study.tell(trial, 0.0)


def test_a_dependent_range_that_can_be_empty_is_refused() -> None:
    with pytest.raises(SpaceError) as caught:
        parse_space({"m": {"type": "int", "low": 0, "high": 3}, "k": {"type": "int", "low": 1, "high": "m"}})
    assert caught.value.key == "k.low"
    with pytest.raises(SpaceError) as caught:
        parse_space({"k": {"type": "int", "low": 1, "high": "nowhere"}})
    assert caught.value.key == "k.high"
