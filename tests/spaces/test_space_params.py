"""Parameter specs, SearchSpace and parse_space."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from spaces import (
    PARAM_TYPES,
    BatchSizeParam,
    CategoricalParam,
    FixedParam,
    FloatParam,
    IntParam,
    SearchSpace,
    SpaceError,
    parse_space,
    register_param_type,
)
from spaces.params import ConditionalParam

SPEC = {
    "lr": {"type": "float", "low": 1e-4, "high": 0.3, "log": True},
    "hidden": {"type": "int", "low": 32, "high": 256, "step": 32},
    "model": {"type": "categorical", "choices": ["mlp", "cnn"]},
    "batch_size": {"type": "batch_size", "low": 16, "high": 256},
    "weight_decay": 0.0001,
    "schedule": "cosine",
}


def test_parse_space_happy_path() -> None:
    space = parse_space(SPEC)
    assert space.names == ("lr", "hidden", "model", "batch_size", "weight_decay", "schedule")
    assert space.distributions() == {
        "lr": FloatDistribution(1e-4, 0.3, log=True),
        "hidden": IntDistribution(32, 256, step=32),
        "model": CategoricalDistribution(("mlp", "cnn")),
        "batch_size": CategoricalDistribution((16, 32, 64, 128, 256)),
    }
    assert space.fixed() == {"weight_decay": 0.0001, "schedule": "cosine"}
    assert "lr" in space and "nope" not in space
    assert isinstance(space["model"], CategoricalParam)


def test_complete_returns_builtins_and_fixed_values() -> None:
    space = parse_space(SPEC)
    config = space.complete(
        {"lr": np.float64(0.01), "hidden": np.int64(64), "model": np.str_("cnn"), "batch_size": np.int64(32)}
    )
    assert config == {
        "lr": 0.01,
        "hidden": 64,
        "model": "cnn",
        "batch_size": 32,
        "weight_decay": 0.0001,
        "schedule": "cosine",
    }
    assert [type(v) for v in config.values()] == [float, int, str, int, float, str]
    pickle.dumps(config)


@pytest.mark.parametrize(
    ("sampled", "key", "fragment"),
    [
        ({"lr": 0.01, "hidden": 64, "model": "cnn"}, "batch_size", "missing"),
        ({"lr": 0.01, "hidden": 64, "model": "cnn", "batch_size": 32, "extra": 1}, "extra", "not a parameter"),
        ({"lr": 0.01, "hidden": 64, "model": "cnn", "batch_size": 32, "schedule": "x"}, "schedule", "is fixed"),
        ({"lr": 0.01, "hidden": 64, "model": "rnn", "batch_size": 32}, "model", "not one of"),
        ({"lr": 0.01, "hidden": 64, "model": "cnn", "batch_size": 48}, "batch_size", "not one of"),
        ({"lr": 0.01, "hidden": 64.5, "model": "cnn", "batch_size": 32}, "hidden", "integer"),
    ],
)
def test_complete_errors(sampled: dict, key: str, fragment: str) -> None:
    with pytest.raises(SpaceError) as info:
        parse_space(SPEC).complete(sampled)
    assert info.value.key == key
    assert fragment in info.value.problem


@pytest.mark.parametrize(
    ("table", "key", "fragment"),
    [
        ({"lr": {"type": "flaot", "low": 1, "high": 2}}, "lr.type", "did you mean 'float'"),
        ({"lr": {"type": "flaot", "low": 1, "high": 2}}, "lr.type", "batch_size, categorical"),
        ({"lr": {"low": 1, "high": 2}}, "lr.type", "missing"),
        ({"lr": {"type": 3}}, "lr.type", "must be a string"),
        ({"lr": {"type": "float", "low": 1e-4, "high": 0.3, "logg": True}}, "lr.logg", "did you mean 'log'"),
        ({"lr": {"type": "float", "low": 1e-4}}, "lr.high", "missing"),
        ({"lr": {"type": "float", "low": "a", "high": 0.3}}, "lr.low", "must be a number, got 'a' (str)"),
        ({"lr": {"type": "float", "low": True, "high": 0.3}}, "lr.low", "(bool)"),
        ({"lr": {"type": "float", "low": 0.5, "high": 0.3}}, "lr.low", "must be <= high"),
        ({"lr": {"type": "float", "low": 0.0, "high": 0.3, "log": True}}, "lr.low", "> 0 when log"),
        ({"lr": {"type": "float", "low": 0.1, "high": 0.3, "log": "yes"}}, "lr.log", "true or false"),
        ({"lr": {"type": "float", "low": 0.1, "high": 0.3, "step": 0}}, "lr.step", "> 0"),
        ({"lr": {"type": "float", "low": 0.1, "high": 0.3, "step": 0.1, "log": True}}, "lr.step", "log"),
        ({"lr": {"type": "float", "low": float("nan"), "high": 0.3}}, "lr.low", "finite"),
        ({"h": {"type": "int", "low": 1.5, "high": 4}}, "h.low", "integer"),
        ({"h": {"type": "int", "low": 0, "high": 4, "log": True}}, "h.low", ">= 1 when log"),
        ({"h": {"type": "int", "low": 1, "high": 4, "step": -1}}, "h.step", "> 0"),
        ({"h": {"type": "int", "low": 5, "high": 3}}, "h.low", "must be <= high (3), got 5"),
        ({"h": {"type": "int", "low": 8, "high": 2, "step": 2}}, "h.low", "must be <= high (2), got 8"),
        ({"h": {"type": "int", "low": 64, "high": 16, "log": True}}, "h.low", "must be <= high (16), got 64"),
        ({"h": {"type": "int", "low": 1, "high": 8, "step": 2, "log": True}}, "h.step", "must be 1"),
        ({"h": {"type": "int", "low": 0, "high": 10, "step": 3}}, "h.high", "multiple of step"),
        ({"m": {"type": "categorical", "choices": []}}, "m.choices", "empty"),
        ({"m": {"type": "categorical", "choices": "mlp"}}, "m.choices", "must be a list"),
        ({"m": {"type": "categorical", "choices": ["a", "b", "a"]}}, "m.choices[2]", "duplicate"),
        ({"m": {"type": "categorical", "choices": [1, True]}}, "m.choices[1]", "duplicate"),
        ({"m": {"type": "categorical", "choices": [[1, 2]]}}, "m.choices[0]", "str, int, float, bool or None"),
        ({"m": {"type": "categorical"}}, "m.choices", "missing"),
        ({"b": {"type": "batch_size", "low": 24, "high": 256}}, "b.low", "power of two"),
        ({"b": {"type": "batch_size", "low": 16, "high": 100}}, "b.high", "nearest: 64 or 128"),
        ({"b": {"type": "batch_size", "low": 64, "high": 16}}, "b.low", "<= high"),
        ({"b": {"type": "batch_size", "low": 0, "high": 16}}, "b.low", ">= 1"),
        ({"b": {"type": "batch_size", "low": 16, "high": 64, "step": 2}}, "b.step", "unknown key"),
        ({"m": ["mlp", "cnn"]}, "m", '{type="categorical", choices=[...]}'),
        ({"m": {"type": "fixed", "value": [1]}}, "m", "str, int, float, bool or None"),
    ],
)
def test_parse_space_errors(table: dict, key: str, fragment: str) -> None:
    with pytest.raises(SpaceError) as info:
        parse_space(table)
    assert info.value.key == key
    assert fragment in info.value.problem
    assert str(info.value) == f"{key}: {info.value.problem}"


def test_space_error_is_a_value_error_and_pickles() -> None:
    err = SpaceError("lr.low", "must be > 0")
    assert isinstance(err, ValueError)
    again = pickle.loads(pickle.dumps(err))
    assert (again.key, again.problem, str(again)) == ("lr.low", "must be > 0", "lr.low: must be > 0")


def test_duplicate_names_in_search_space() -> None:
    with pytest.raises(SpaceError, match="duplicate parameter name"):
        SearchSpace((FixedParam("a", 1), FloatParam("a", 0.0, 1.0)))


def test_params_are_frozen_and_normalised() -> None:
    p = FloatParam("lr", 1, 2)
    assert isinstance(p.low, float)
    with pytest.raises(AttributeError):
        p.low = 3.0  # type: ignore[misc]
    assert CategoricalParam("m", ["a", "b"]).choices == ("a", "b")
    assert FixedParam("x", np.float32(0.5)).value == 0.5
    assert type(FixedParam("x", np.float32(0.5)).value) is float
    assert FixedParam("x", 1).distribution() is None
    assert IntParam("h", 1, 8, log=True).distribution() == IntDistribution(1, 8, log=True)


def test_registered_param_type_is_parsed() -> None:
    def build(name: str, table: dict) -> BatchSizeParam:
        return BatchSizeParam(name, table["min"], table["max"])

    register_param_type("test_genome", build)
    try:
        space = parse_space({"g": {"type": "test_genome", "min": 2, "max": 8}})
        assert space.distributions()["g"] == CategoricalDistribution((2, 4, 8))
        with pytest.raises(SpaceError, match="already registered"):
            register_param_type("test_genome", lambda n, t: FixedParam(n, 1))
    finally:
        del PARAM_TYPES["test_genome"]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 12), st.integers(0, 12))
def test_batch_size_distribution_holds_only_powers_of_two(a: int, b: int) -> None:
    low, high = sorted((2**a, 2**b))
    dist = BatchSizeParam("b", low, high).distribution()
    assert dist.choices[0] == low and dist.choices[-1] == high
    for size in dist.choices:
        assert type(size) is int and size >= 1 and size & (size - 1) == 0
    assert len(dist.choices) == abs(a - b) + 1


@settings(max_examples=100, deadline=None)
@given(st.integers(-1000, 1000), st.integers(-1000, 1000), st.integers(1, 7))
def test_int_bounds_are_refused_when_reversed_whatever_the_step(a: int, b: int, step: int) -> None:
    """``low > high`` is an error at ``<name>.low``, even when ``high - low`` is a multiple of ``step``
    (a negative span passes the step check, so only the bounds check can catch it)."""
    low, high = max(a, b), min(a, b)
    if low == high:
        assert IntParam("h", low, high).distribution() == IntDistribution(low, high)  # one value: allowed
        return
    high = low - step * max(1, (low - high) // step)  # reversed, and on the step grid
    with pytest.raises(SpaceError) as info:
        IntParam("h", low, high, step=step)
    assert info.value.key == "h.low"
    assert info.value.problem == f"must be <= high ({high}), got {low}"
    with pytest.raises(SpaceError, match=r"^h\.low: must be <= high"):
        parse_space({"h": {"type": "int", "low": low, "high": high, "step": step}})


# --- conditional parameters ----------------------------------------------------------------------

COND = {
    "model": {"type": "categorical", "choices": ["mlp", "cnn"]},
    "depth": {"type": "int", "low": 1, "high": 3, "when": {"hidden": [192, 256]}, "default": 0},  # before hidden
    "hidden": {"type": "int", "low": 64, "high": 256, "step": 64, "when": {"model": "mlp"}},
    "channels": {"type": "categorical", "choices": [8, 16], "when": {"model": "cnn"}, "default": 4},
    "lr": 0.1,
}


def test_conditional_parameters_parse_in_dependency_order() -> None:
    space = parse_space(COND)
    assert space.names == ("model", "depth", "hidden", "channels", "lr")
    assert space.order == ("model", "hidden", "depth", "channels", "lr")  # depth after what it names
    assert space.conditional == ("depth", "hidden", "channels")
    assert space.base_distributions() == {"model": CategoricalDistribution(("mlp", "cnn"))}
    assert set(space.distributions()) == {"model", "depth", "hidden", "channels"}
    hidden = space["hidden"]
    assert isinstance(hidden, ConditionalParam) and hidden.when == (("model", ("mlp",)),)
    assert hidden.low == 64 and hidden.step == 64  # the wrapped parameter's attributes
    assert space["depth"].has_default and space["depth"].default == 0
    assert pickle.loads(pickle.dumps(space)) == space


@pytest.mark.parametrize(
    ("sampled", "config"),
    [
        ({"model": "cnn", "channels": 8}, {"model": "cnn", "depth": 0, "channels": 8, "lr": 0.1}),
        ({"model": "mlp", "hidden": 128}, {"model": "mlp", "depth": 0, "hidden": 128, "channels": 4, "lr": 0.1}),
        (
            {"model": "mlp", "hidden": 256, "depth": 2},
            {"model": "mlp", "depth": 2, "hidden": 256, "channels": 4, "lr": 0.1},
        ),
    ],
)
def test_complete_leaves_out_or_defaults_what_its_condition_excludes(sampled: dict, config: dict) -> None:
    assert parse_space(COND).complete(sampled) == config


@pytest.mark.parametrize(
    ("sampled", "key", "fragment"),
    [
        ({"model": "cnn", "channels": 8, "hidden": 64}, "hidden", "its condition (model = 'mlp') does not hold"),
        ({"model": "mlp", "hidden": 64, "depth": 1}, "depth", "(hidden in [192, 256]) does not hold"),
        ({"model": "mlp"}, "hidden", "missing"),
    ],
)
def test_complete_refuses_values_that_contradict_the_conditions(sampled: dict, key: str, fragment: str) -> None:
    with pytest.raises(SpaceError) as info:
        parse_space(COND).complete(sampled)
    assert info.value.key == key and fragment in info.value.problem


def test_suggest_adds_the_conditional_parameters_on_an_optuna_trial_define_by_run() -> None:
    import optuna

    space = parse_space(COND)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(40):
        trial = study.ask(fixed_distributions=space.base_distributions())
        space.suggest(trial)
        params = trial.params
        config = space.complete(params)  # consistent with the conditions, or it raises
        assert ("hidden" in params) == (params["model"] == "mlp")
        assert ("depth" in params) == (params.get("hidden") in (192, 256))
        assert config["channels"] == params.get("channels", 4)
        seen.add((params["model"], "depth" in params))
        study.tell(trial, 0.0)
    assert seen == {("mlp", True), ("mlp", False), ("cnn", False)}


H = {"type": "int", "low": 1, "high": 4}


@pytest.mark.parametrize(
    ("table", "key", "fragment"),
    [
        ({"h": {**H, "when": {"m": 1}}}, "h.when.m", "unknown parameter"),
        (
            {"m": {"type": "categorical", "choices": [1, 2]}, "h": {**H, "when": {"m": True}}},
            "h.when.m",
            "True is not a value 'm' can take: [1, 2]",
        ),
        (
            {"m": {"type": "batch_size", "low": 16, "high": 64}, "h": {**H, "when": {"m": 24}}},
            "h.when.m",
            "24 is not a value 'm' can take: [16, 32, 64]",
        ),
        ({"a": {**H, "when": {"b": 1}}, "b": {**H, "when": {"a": 2}}}, "a.when", "cycle: a -> b -> a"),
        ({"h": {**H, "when": {}}}, "h.when", "at least one parameter"),
        ({"m": 1, "h": {**H, "when": {"m": []}}}, "h.when.m", "non-empty list"),
        ({"m": 1, "h": {**H, "when": {"m": 1}, "default": [1]}}, "h.default", "str, int"),
    ],
)
def test_conditional_errors_name_the_key(table: dict, key: str, fragment: str) -> None:
    with pytest.raises(SpaceError) as info:
        parse_space(table)
    assert info.value.key == key and fragment in info.value.problem, str(info.value)


def test_a_fixed_value_can_be_conditional_and_a_condition_can_name_a_fixed_value() -> None:
    space = parse_space(
        {
            "model": "mlp",
            "warmup": {"type": "fixed", "value": 0.1, "when": {"model": "mlp"}},
            "hidden": {"type": "int", "low": 1, "high": 4, "when": {"model": ["mlp", "cnn"]}},
        }
    )
    assert space.base_distributions() == {}
    assert space.complete({"hidden": 2}) == {"model": "mlp", "warmup": 0.1, "hidden": 2}
