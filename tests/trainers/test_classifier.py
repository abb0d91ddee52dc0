from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from trainers.api import RecordingReporter
from trainers.classifier import ACCEPTED_PARAMS, fit, parse_params, resolve_device

Strip = Callable[[dict[str, float]], dict[str, float]]
NOISE_KEYS = {
    "b_simple",
    "b_simple_lo",
    "b_simple_hi",
    "b_simple_limit",
    "b_simple_above_range",
}  # with options.noise_scale_every
METRIC_KEYS = set(fit.reported_metrics) - NOISE_KEYS


def test_reports_every_epoch_with_all_metrics(make_config) -> None:
    reporter = RecordingReporter()
    final = fit(make_config(epochs=2), reporter)
    assert [step for step, _ in reporter.reports] == [1, 2]
    assert set(final) == METRIC_KEYS and all(type(v) is float for v in final.values())
    assert final == reporter.reports[-1][1]
    assert final["steps"] == 2 * math.ceil(1438 / 32) and final["examples"] == 2 * 1438


def test_same_seed_is_bit_identical_and_other_seed_differs(make_config, without_timing: Strip) -> None:
    params = {"lr": 0.05, "dropout": 0.2, "schedule": "cosine", "warmup": 0.1}
    runs = []
    for seed in (1, 1, 2):
        reporter = RecordingReporter()
        fit(make_config(params, seed=seed), reporter)
        runs.append([without_timing(m) for _, m in reporter.reports])
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_fit_leaves_global_torch_state_alone(make_config) -> None:
    rng, threads = torch.random.get_rng_state(), torch.get_num_threads()
    fit(make_config({"lr": 0.05, "dropout": 0.3}, epochs=1, deterministic=True), RecordingReporter())
    assert torch.equal(rng, torch.random.get_rng_state())
    assert torch.get_num_threads() == threads and not torch.are_deterministic_algorithms_enabled()


def test_digits_mlp_with_adam_reaches_95_percent(make_config) -> None:
    final = fit(make_config({"lr": 3e-3, "optimizer": "adam"}, epochs=10), RecordingReporter())
    assert final["val_accuracy"] >= 0.95


def test_cnn_trains(make_config) -> None:
    reporter = RecordingReporter()
    fit(make_config({"lr": 3e-3, "optimizer": "adamw", "model": "cnn", "channels": 8}, epochs=4), reporter)
    first, last = reporter.reports[0][1], reporter.reports[-1][1]
    assert last["val_loss"] < first["val_loss"] and last["val_accuracy"] >= 0.9


def test_synthetic_dataset_trains(make_config) -> None:
    options = {"n_samples": 800, "n_features": 10, "n_classes": 3}
    reporter = RecordingReporter()
    fit(make_config({"lr": 0.02, "batch_size": 64}, dataset="synthetic", options=options, epochs=5), reporter)
    accuracies = [m["val_accuracy"] for _, m in reporter.reports]
    assert accuracies[-1] > 1 / 3 + 0.1
    assert reporter.reports[-1][1]["examples"] == 5 * 640


def test_zero_lr_does_not_learn(make_config) -> None:
    reporter = RecordingReporter()
    fit(make_config({"lr": 0.0, "optimizer": "adam"}), reporter)
    val = {(m["val_loss"], m["val_accuracy"]) for _, m in reporter.reports}
    assert len(val) == 1 and reporter.reports[-1][1]["lr"] == 0.0


@pytest.mark.parametrize("schedule", ["step", "exponential", "warmup_cosine", "onecycle"])
def test_schedules_and_lr_scaling_apply(make_config, schedule: str) -> None:
    params = {"lr": 0.05, "schedule": schedule, "batch_size": 64, "lr_scaling": "linear"}
    reporter = RecordingReporter()
    fit(make_config(params, epochs=2), reporter)
    assert reporter.reports[-1][1]["lr"] < 0.1  # decayed below the scaled base lr (0.05 * 64 / 32)


def test_non_finite_loss_raises_with_epoch_and_step(make_config) -> None:
    with pytest.raises(FloatingPointError, match=r"epoch 1, step \d+"):
        fit(make_config({"lr": 1e6}), RecordingReporter())


def test_unknown_param_is_named_with_the_accepted_ones(make_config) -> None:
    with pytest.raises(ValueError, match=r"\['learning_rate'\].*'batch_size'.*'lr'"):
        fit(make_config({"lr": 0.1, "learning_rate": 0.1}), RecordingReporter())
    assert fit.accepted_params == ACCEPTED_PARAMS  # type: ignore[attr-defined]
    assert {"model", "lr", "batch_size", "optimizer", "schedule", "warmup", "lr_scaling"} <= ACCEPTED_PARAMS


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "params.lr is required"),
        ({"lr": -1.0}, "params.lr=-1.0"),
        ({"lr": 0.1, "batch_size": 32.5}, "params.batch_size=32.5: must be an integer"),
        ({"lr": 0.1, "depth": True}, "params.depth=True: must be a number"),
        ({"lr": 0.1, "optimizer": "lbfgs"}, "params.optimizer='lbfgs'"),
        ({"lr": 0.1, "warmup": 1.0}, "params.warmup=1.0"),
        ({"lr": 0.1, "model": 3}, "params.model=3: must be a string"),
        ({"lr": float("inf")}, "params.lr=inf: must be finite"),
        ({"lr": 0.1, "hidden": float("nan")}, "params.hidden=nan: must be finite"),
    ],
)
def test_bad_params_are_one_line_value_errors(params: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_params(params)


def test_params_are_coerced_to_their_types() -> None:
    p = parse_params({"lr": 1, "batch_size": 64.0})
    assert type(p.lr) is float and type(p.batch_size) is int and p.batch_size == 64


def test_bad_schedule_family_fails_before_training(make_config) -> None:
    reporter = RecordingReporter()
    with pytest.raises(ValueError, match="schedule.family"):
        fit(make_config({"lr": 0.1, "schedule": "linear"}), reporter)
    assert reporter.reports == []


def test_device_resolution(make_config) -> None:
    assert resolve_device(make_config(device="cpu", devices=(0,))) == torch.device("cpu")
    if torch.cuda.is_available():
        assert resolve_device(make_config(device="auto", devices=(0,))) == torch.device("cuda:0")
    else:
        assert resolve_device(make_config(device="auto")) == torch.device("cpu")
        for fields in ({"device": "cuda"}, {"device": "auto", "devices": (0,)}):
            with pytest.raises(RuntimeError, match="CUDA is not available"):
                resolve_device(make_config(**fields))


def test_reported_metrics_declared_and_model_size_measured(make_config) -> None:
    assert {"val_accuracy", "val_loss", "examples", "steps", "n_params", "macs"} <= set(fit.reported_metrics)
    mlp = fit(make_config({"lr": 0.05, "hidden": 16, "depth": 1}, epochs=1), RecordingReporter())
    # 64 -> 16 -> 10 with biases: 64*16 + 16 + 16*10 + 10 weights; MACs: 64*16 + 16*10
    assert mlp["n_params"] == 64 * 16 + 16 + 16 * 10 + 10
    assert mlp["macs"] == 64 * 16 + 16 * 10


def test_architecture_genome_param_builds_the_genome_model(make_config) -> None:
    cell = "|nor_conv_3x3~0|+|skip_connect~0|none~1|+|none~0|none~1|avg_pool_3x3~2|"
    reporter = RecordingReporter()
    final = fit(make_config({"lr": 0.01, "optimizer": "adam", "arch": cell}, epochs=1), reporter)
    assert final["n_params"] > 0 and final["val_accuracy"] > 0.1
    with pytest.raises(ValueError, match="params.arch"):
        fit(make_config({"lr": 0.01, "arch": "|bogus~0|"}, epochs=1), RecordingReporter())
