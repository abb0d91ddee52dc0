"""The classifier reports the gradient noise scale B_simple over training when asked to."""

from __future__ import annotations

import math
from pathlib import Path

from trainers.api import RecordingReporter, TrialConfig
from trainers.classifier import fit


def config(tmp: Path | None = None, **options: object) -> TrialConfig:
    return TrialConfig(
        study="n", number=0, params={"lr": 0.05, "batch_size": 64}, seed=3, epochs=3,
        checkpoint_dir=str(tmp) if tmp else None, options=dict(options),
    )  # fmt: skip


def test_b_simple_reported_only_when_enabled_and_training_is_unchanged() -> None:
    on, off = RecordingReporter(), RecordingReporter()
    fit(config(noise_scale_every=2), on)
    fit(config(), off)
    values = [m["b_simple"] for _s, m in on.reports]
    assert all(math.isfinite(v) and v > 0 for v in values)
    assert all("b_simple" not in m for _s, m in off.reports)
    # Measuring uses torch.autograd.grad on the side: the training itself is the same.
    assert [m["val_loss"] for _s, m in on.reports] == [m["val_loss"] for _s, m in off.reports]


def test_b_simple_survives_a_resume_exactly(tmp_path: Path) -> None:
    whole = RecordingReporter()
    fit(config(noise_scale_every=2), whole)
    first = RecordingReporter(stop_after=1)
    fit(config(tmp_path, noise_scale_every=2), first)
    rest = RecordingReporter()
    fit(config(tmp_path, noise_scale_every=2), rest)
    resumed = [m["b_simple"] for _s, m in first.reports + rest.reports]
    assert resumed == [m["b_simple"] for _s, m in whole.reports]
