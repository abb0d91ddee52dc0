"""An interrupted trial resumed from its checkpoint ends exactly where an uninterrupted one does."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from trainers.api import RecordingReporter, TrialConfig
from trainers.classifier import fit
from trainers.loop import CHECKPOINT_NAME

Strip = Callable[[dict[str, float]], dict[str, float]]
PARAMS = {"lr": 3e-3, "optimizer": "adam", "dropout": 0.2, "schedule": "cosine", "warmup": 0.1, "hidden": 32}


@pytest.mark.parametrize(("checkpoint_every", "stop_after"), [(1, 2), (2, 3)])
def test_resumed_run_equals_uninterrupted_run(
    make_config, without_timing: Strip, tmp_path: Path, checkpoint_every: int, stop_after: int
) -> None:
    whole = RecordingReporter()
    expected = fit(make_config(PARAMS, epochs=5), whole)

    config = make_config(PARAMS, epochs=5, checkpoint_dir=str(tmp_path), checkpoint_every=checkpoint_every)
    first = RecordingReporter(stop_after=stop_after)
    stopped = fit(config, first)
    assert stopped["epoch"] == stop_after and (tmp_path / CHECKPOINT_NAME).exists()

    second = RecordingReporter()
    final = fit(config, second)
    resumed_from = stop_after - stop_after % checkpoint_every
    # the reports the checkpoint covers are sent again, exactly as first sent, then training goes on
    assert [step for step, _ in second.reports] == list(range(1, 6))
    assert second.reports[:resumed_from] == first.reports[:resumed_from]
    assert without_timing(final) == without_timing(expected)
    tail = [without_timing(m) for _, m in whole.reports[resumed_from:]]
    assert [without_timing(m) for _, m in second.reports[resumed_from:]] == tail


def test_finished_run_returns_its_last_metrics_without_training(make_config, tmp_path: Path) -> None:
    config = make_config(epochs=2, checkpoint_dir=str(tmp_path))
    first = RecordingReporter()
    final = fit(config, first)
    again = RecordingReporter()
    assert fit(config, again) == final and again.reports == first.reports  # only the covered reports, again


def test_checkpoint_of_another_trial_is_refused(make_config, tmp_path: Path) -> None:
    fit(make_config(epochs=1, checkpoint_dir=str(tmp_path)), RecordingReporter())
    with pytest.raises(ValueError, match="written by another trial"):
        fit(make_config(epochs=2, seed=8, checkpoint_dir=str(tmp_path)), RecordingReporter())


def test_a_later_segment_with_a_new_learning_rate_resumes_the_trials_own_checkpoint(
    make_config, tmp_path: Path
) -> None:
    """A segment's overrides (the lr after a rule) are no other trial's params: its checkpoint is resumed, not
    refused, and training goes on from it at the new rate (steps and examples continue)."""
    params = {"lr": 3e-3, "optimizer": "adam", "schedule": "constant", "hidden": 32}
    config = make_config(params, epochs=1, checkpoint_dir=str(tmp_path))
    first = RecordingReporter()
    fit(config, first)
    later = dataclasses.replace(config, params={**params, "lr": 6e-3}, base_params=params, epochs=2)
    second = RecordingReporter()
    fit(later, second)
    (_, one), (_, two) = second.reports
    assert one == first.reports[0][1]  # the checkpoint's report, sent again
    assert two["lr"] == 6e-3 and two["examples"] == 2 * one["examples"] and two["steps"] == 2 * one["steps"]


@pytest.mark.slow
def test_scaling_trial_resumed_in_a_fresh_process_reports_the_same_bits(
    make_config, without_timing: Strip, tmp_path: Path
) -> None:
    """As a trial retried after its worker was lost: SGD with momentum, the LR scaled to the batch size and the
    noise scale measured (its estimator's state and the measurement draws are in the checkpoint), resumed by
    ``python -m trainers`` in another process. Every report, bit for bit, as the uninterrupted run's."""
    params = {"optimizer": "sgd", "momentum": 0.9, "lr": 0.3, "batch_size": 64, "schedule": "constant"}
    params |= {"lr_scaling": "sqrt", "base_batch_size": 32, "hidden": 64}
    config = make_config(params, epochs=4, options={"noise_scale_every": 4})
    whole = RecordingReporter()
    fit(config, whole)

    resumable = TrialConfig.from_dict({**config.to_dict(), "checkpoint_dir": str(tmp_path / "ckpt")})
    fit(resumable, RecordingReporter(stop_after=2))
    (tmp_path / "config.json").write_text(json.dumps(resumable.to_dict()))
    out = subprocess.run(
        [sys.executable, "-m", "trainers", str(tmp_path / "config.json")],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    lines = [json.loads(line) for line in out.stdout.splitlines()][:-1]  # the reports; the last line: the result
    again = [(int(m.pop("step")), without_timing(m)) for m in lines]
    assert "b_simple" in again[-1][1]
    assert again == [(step, without_timing(m)) for step, m in whole.reports]
