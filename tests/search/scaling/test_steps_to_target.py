"""Batch-size scaling analysis: the steps a trial took to reach its target, from its reports (``steps_to_target``)."""

from __future__ import annotations

import pytest

from search.scaling.fit import ScalingError, TargetHit, steps_to_target

HISTORY = [
    (1, {"val_accuracy": 0.50, "steps": 100.0, "examples": 3200.0, "epoch_seconds": 2.0}),
    (2, {"val_accuracy": 0.80, "steps": 200.0, "examples": 6400.0, "epoch_seconds": 2.5}),
    (3, {"val_accuracy": 0.96, "steps": 300.0, "examples": 9600.0, "epoch_seconds": 3.0}),
    (4, {"val_accuracy": 0.97, "steps": 400.0, "examples": 12800.0, "epoch_seconds": 3.0}),
]


def test_steps_to_target_at_report_granularity_returns_the_first_report_reaching_it() -> None:
    hit = steps_to_target(HISTORY, "val_accuracy", 0.95, "max", time_key="epoch_seconds", interpolate=False)
    assert hit == TargetHit(steps=300.0, examples=9600.0, seconds=7.5, report=3, value=0.96)


def test_steps_to_target_interpolates_between_reports_by_default() -> None:
    hit = steps_to_target(HISTORY, "val_accuracy", 0.88, "max", time_key="epoch_seconds")
    assert hit is not None
    assert hit.steps == pytest.approx(250.0)
    assert hit.examples == pytest.approx(8000.0)
    assert hit.seconds == pytest.approx(6.0)
    assert (hit.report, hit.value) == (3, 0.96)  # the report that reached it
    # 0.95 lies 15/16 of the way from 0.80 (step 200) to 0.96 (step 300)
    assert steps_to_target(HISTORY, "val_accuracy", 0.95, "max").steps == pytest.approx(293.75)  # type: ignore[union-attr]
    # a hit at the first report carrying the metric has nothing to interpolate from
    assert steps_to_target(HISTORY, "val_accuracy", 0.4, "max").steps == 100.0  # type: ignore[union-attr]


def test_steps_to_target_min_mode_cumulative_clock_and_not_reached() -> None:
    history = [(i, {"loss": loss, "steps": 10.0 * i, "clock": 1.5 * i}) for i, loss in enumerate([3, 2, 1], 1)]
    hit = steps_to_target(history, "loss", 2.0, "min", examples_key=None, time_key="clock", time_is_cumulative=True)
    assert hit == TargetHit(steps=20.0, examples=None, seconds=3.0, report=2, value=2.0)
    assert steps_to_target(history, "loss", 0.5, "min", examples_key=None) is None
    assert steps_to_target([], "loss", 0.5, "min") is None


def test_steps_to_target_skips_reports_without_the_metric_and_rejects_a_misspelt_one() -> None:
    history = [(1, {"steps": 5.0, "examples": 5.0}), (2, {"acc": 0.9, "steps": 10.0, "examples": 20.0})]
    assert steps_to_target(history, "acc", 0.5, "max") == TargetHit(10.0, 20.0, None, 2, 0.9)
    # a time key that no report carries gives no wall time (not 0 seconds)
    assert steps_to_target(history, "acc", 0.5, "max", time_key="epoch_seconds").seconds is None  # type: ignore[union-attr]
    with pytest.raises(ScalingError, match="'accuracy' never appears in the reports"):
        steps_to_target(history, "accuracy", 0.5, "max")
    with pytest.raises(ScalingError, match="mode: must be 'max' or 'min'"):
        steps_to_target(history, "acc", 0.5, "maximize")  # type: ignore[arg-type]
