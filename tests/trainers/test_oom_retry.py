"""``oom_retry = "accumulate"``: an out-of-memory trial runs again once at half the micro-batch, same global batch."""

from __future__ import annotations

import pytest
import torch

from tests.search.oom_trainers import oom_above_fit
from trainers.api import RecordingReporter, TrialConfig
from trainers.oom import halved_micro_batch, run_with_oom_retry


def _config(batch: int, limit: int, oom_retry: str) -> TrialConfig:
    return TrialConfig(
        study="oom",
        number=0,
        params={"lr": 0.05, "batch_size": batch, "model": "mlp", "hidden": 16},
        seed=3,
        epochs=1,
        dataset="digits",
        device="cpu",
        options={"oom_above": limit},
        oom_retry=oom_retry,
    )


def test_an_oom_trial_is_rerun_at_half_the_micro_batch_with_the_same_steps_and_examples() -> None:
    fits = oom_above_fit(_config(64, 64, "none"), RecordingReporter())  # fits at 64: the reference
    retried = oom_above_fit(_config(64, 40, "accumulate"), RecordingReporter())  # 64 > 40: OOM, then 32s
    assert retried["oom_retries"] == 1.0 and retried["micro_batch"] == 32.0
    assert (retried["steps"], retried["examples"]) == (fits["steps"], fits["examples"])  # the same global batch
    assert retried["val_accuracy"] == pytest.approx(fits["val_accuracy"], abs=0.02)  # the same math, summed apart


def test_without_the_retry_or_when_half_is_still_too_big_the_oom_is_raised() -> None:
    with pytest.raises(torch.cuda.OutOfMemoryError):
        oom_above_fit(_config(64, 40, "none"), RecordingReporter())
    with pytest.raises(torch.cuda.OutOfMemoryError):
        oom_above_fit(_config(256, 40, "accumulate"), RecordingReporter())  # 128 > 40 too: once only


def test_other_errors_are_never_retried() -> None:
    calls: list[int | None] = []

    def run(micro: int | None) -> dict[str, float]:
        calls.append(micro)
        raise ValueError("a bug")

    with pytest.raises(ValueError):
        run_with_oom_retry(run, None, 64, 1, "accumulate")
    assert calls == [None]


def test_half_the_micro_batch_is_per_replica() -> None:
    assert halved_micro_batch(64, 1, None) == 32
    assert halved_micro_batch(64, 2, None) == 16  # each of 2 replicas passes 32
    assert halved_micro_batch(64, 1, 8) == 4
    assert halved_micro_batch(64, 64, None) is None  # one example per pass: nothing to halve
