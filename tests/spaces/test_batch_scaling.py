"""power_of_two_sizes and LRScaling."""

from __future__ import annotations

import math

import pytest

from spaces import LRScaling, SpaceError, power_of_two_sizes


def test_power_of_two_sizes() -> None:
    assert power_of_two_sizes(16, 256) == (16, 32, 64, 128, 256)
    assert power_of_two_sizes(1, 1) == (1,)


@pytest.mark.parametrize(
    ("low", "high", "key", "fragment"),
    [
        (3, 8, "batch_size.low", "power of two"),
        (4, 12, "batch_size.high", "power of two"),
        (8, 4, "batch_size.low", "<= high"),
        (0, 4, "batch_size.low", ">= 1"),
        (2.0, 4, "batch_size.low", "integer"),
    ],
)
def test_power_of_two_sizes_errors(low: int, high: int, key: str, fragment: str) -> None:
    with pytest.raises(SpaceError) as info:
        power_of_two_sizes(low, high)
    assert info.value.key == key and fragment in info.value.problem


def test_lr_scaling_rules() -> None:
    assert LRScaling()(0.1, 256) == 0.1
    assert LRScaling("linear", 32)(0.1, 256) == pytest.approx(0.8)
    assert LRScaling("sqrt", 32)(0.1, 128) == pytest.approx(0.2)
    assert LRScaling("sqrt", 64)(0.1, 32) == pytest.approx(0.1 / math.sqrt(2))


@pytest.mark.parametrize(
    ("kwargs", "key", "fragment"),
    [
        ({"rule": "linaer"}, "lr_scaling.rule", "did you mean 'linear'"),
        ({"rule": "linear", "base_batch_size": 0}, "lr_scaling.base_batch_size", ">= 1"),
    ],
)
def test_lr_scaling_errors(kwargs: dict, key: str, fragment: str) -> None:
    with pytest.raises(SpaceError) as info:
        LRScaling(**kwargs)
    assert info.value.key == key and fragment in info.value.problem


def test_lr_scaling_call_errors() -> None:
    with pytest.raises(SpaceError, match="batch_size: must be >= 1"):
        LRScaling("linear")(0.1, 0)
    with pytest.raises(SpaceError, match="lr: must be > 0"):
        LRScaling("linear")(-0.1, 8)


def test_the_rule_a_trainers_parameters_name_and_its_formula() -> None:
    assert LRScaling.of_params({}) == LRScaling("none", 32)
    rule = LRScaling.of_params({"lr_scaling": "sqrt", "base_batch_size": 1024, "lr": 0.1})
    assert rule == LRScaling("sqrt", 1024) and rule(0.1, 4096) == pytest.approx(0.2)
    assert rule.formula() == "lr × sqrt(B / 1,024)"
    assert LRScaling("linear", 256).formula() == "lr × B / 256" and LRScaling().formula() == "lr"
