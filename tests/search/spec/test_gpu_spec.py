"""``[trainer]`` GPU keys: gpus (an integer or 1/k), gpu_memory, gpu_headroom, oom_retry."""

from __future__ import annotations

import tomllib

import pytest

from search.spec.campaign_spec import SpecError, parse_spec
from search.spec.gpu import check_gpus, gpu_packing

SPEC = """
[study]
name = "g"
direction = "maximize"
metric = "val_accuracy"
n_trials = 2

[trainer]
epochs = 1
{keys}

[space]
lr = {{ type = "float", low = 1e-3, high = 1e-1, log = true }}
"""


def _spec(keys: str):
    text = SPEC.format(keys=keys)
    return parse_spec(tomllib.loads(text), "g.toml", text)


@pytest.mark.parametrize(("value", "expected"), [(1, 1.0), (2, 2.0), (0.5, 0.5), (0.25, 0.25), (0.125, 0.125)])
def test_whole_gpus_and_fractions_one_over_k_are_accepted(value: float, expected: float) -> None:
    assert check_gpus(value) == expected
    assert _spec(f"gpus = {value}").trainer.gpus == expected


@pytest.mark.parametrize("value", ["0.3", "1.5", "0", "-1", '"half"', "true", "0.001"])
def test_other_gpu_amounts_are_a_one_line_error_naming_the_value_and_the_rule(value: str) -> None:
    with pytest.raises(SpecError, match=r"trainer.gpus: must be an integer from 1 to 1024 or a fraction 1/k .* got"):
        _spec(f"gpus = {value}")


def test_the_packing_keys_reach_the_executor() -> None:
    spec = _spec('gpus = 0.25\ngpu_memory = "auto"\ngpu_headroom = 0.8\noom_retry = "accumulate"')
    packing = gpu_packing(spec)
    assert (packing.gpus, packing.auto_memory, packing.headroom, packing.trials_per_gpu) == (0.25, True, 0.8, 4)
    assert spec.trainer.oom_retry == "accumulate"


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ('gpu_memory = "lots"', "trainer.gpu_memory: 'lots' is not one of none, auto"),
        ("gpu_headroom = 1.5", r"trainer.gpu_headroom: must be in \(0, 1\]"),
        ('oom_retry = "halve"', "trainer.oom_retry: 'halve' is not one of none, accumulate"),
    ],
)
def test_bad_packing_keys_are_spec_errors(keys: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        _spec(keys)
