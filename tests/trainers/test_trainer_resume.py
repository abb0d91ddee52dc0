"""An interrupted trial resumed from its checkpoint ends exactly where an uninterrupted one does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from trainers.api import RecordingReporter
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
