"""The LR schedule is counted in examples seen: a segment that doubles the global batch (a resize) goes on from
the point of the schedule where the segment before it stopped, as a trial run at that batch from the start is."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from trainers.api import RecordingReporter, TrialConfig
from trainers.classifier import fit
from trainers.loop import schedule_step

PARAMS = {"model": "mlp", "optimizer": "sgd", "lr": 0.05, "schedule": "warmup_cosine", "warmup": 0.2, "hidden": 32}


def _lrs(config: TrialConfig) -> dict[int, float]:
    reporter = RecordingReporter()
    fit(config, reporter)
    return {step: metrics["lr"] for step, metrics in reporter.reports}


@pytest.mark.slow
def test_a_segment_that_doubles_the_batch_keeps_the_lr_schedule_where_it_was(tmp_path: Path) -> None:
    first = TrialConfig(
        "sched", 0, {**PARAMS, "batch_size": 32}, seed=4, epochs=1, device="cpu", schedule_epochs=3,
        checkpoint_dir=str(tmp_path / "resized"), deterministic=True,
    )  # fmt: skip
    _lrs(first)
    second = dataclasses.replace(first, params={**PARAMS, "batch_size": 64}, base_params=first.params, epochs=3)
    resized = _lrs(second)
    straight = _lrs(dataclasses.replace(second, base_params={}, checkpoint_dir=None))  # batch 64 from the start
    assert resized[2] == pytest.approx(straight[2]) and resized[3] == pytest.approx(straight[3])
    assert resized[3] < resized[2]  # still decaying: the schedule did not jump to (or past) its end


def test_the_schedule_step_is_the_optimizer_step_while_the_batch_stays() -> None:
    n, batch = 1437, 32
    steps = [schedule_step(epoch, seen, n, batch) for epoch in range(3) for seen in range(0, n, batch)]
    assert steps == list(range(3 * 45))
    assert schedule_step(1, 0, n, 64) == 23  # one epoch in, counted in the new batch's steps
