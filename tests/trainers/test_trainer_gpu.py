"""The classifier on CUDA: deterministic mode gives identical runs, and resume is exact."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from trainers.api import RecordingReporter
from trainers.classifier import fit

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
Strip = Callable[[dict[str, float]], dict[str, float]]
PARAMS = {"lr": 3e-3, "optimizer": "adam", "model": "cnn", "channels": 8, "dropout": 0.2, "schedule": "cosine"}


def test_deterministic_cuda_runs_are_identical_and_resume_exactly(
    make_config, without_timing: Strip, tmp_path: Path
) -> None:
    config = make_config(PARAMS, device="cuda", devices=(0,), deterministic=True, epochs=4)
    runs = []
    for _ in range(2):
        reporter = RecordingReporter()
        fit(config, reporter)
        runs.append([without_timing(m) for _, m in reporter.reports])
    assert runs[0] == runs[1] and runs[0][-1]["val_accuracy"] >= 0.9

    resumable = make_config(
        PARAMS, device="cuda", devices=(0,), deterministic=True, epochs=4, checkpoint_dir=str(tmp_path)
    )
    fit(resumable, RecordingReporter(stop_after=2))
    final = fit(resumable, RecordingReporter())
    assert without_timing(final) == runs[0][-1]
