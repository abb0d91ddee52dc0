"""The classifier reports the gradient noise scale B_simple, with its interval, over training when asked to."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import trainers.loop as loop
from trainers.api import RecordingReporter, TrialConfig
from trainers.classifier import fit
from trainers.noise_scale import measurement_batch

NOISE_KEYS = ("b_simple", "b_simple_lo", "b_simple_hi", "b_simple_above_range")


def config(tmp: Path | None = None, **options: object) -> TrialConfig:
    return TrialConfig(
        study="n",
        number=0,
        params={"lr": 0.05, "batch_size": 64},
        seed=3,
        epochs=3,
        checkpoint_dir=str(tmp) if tmp else None,
        options=dict(options),
    )


def noise_metrics(reporter: RecordingReporter) -> list[tuple[float, ...]]:
    """Per epoch (b_simple, lo, hi, above_range); above the measurable range b_simple and hi are not reported."""
    return [tuple(m.get(k, math.inf) for k in NOISE_KEYS) for _s, m in reporter.reports]


def test_b_simple_reported_only_when_enabled_and_training_is_unchanged() -> None:
    on, off = RecordingReporter(), RecordingReporter()
    final = fit(config(noise_scale_every=2), on)
    fit(config(), off)
    assert all(math.isfinite(v) for _s, m in on.reports for v in m.values())  # a trial's metrics must be
    assert final["b_simple_lo"] == on.reports[-1][1]["b_simple_lo"]
    for b_simple, low, high, above in noise_metrics(on):
        assert 0 <= low <= b_simple <= high and b_simple > 0
        assert above == (1.0 if math.isinf(b_simple) else 0.0) and (math.isinf(high) or above == 0.0)
    assert any(math.isfinite(b) for b, *_ in noise_metrics(on))
    assert all(not set(NOISE_KEYS) & set(m) for _s, m in off.reports)
    # Measuring uses its own batches and torch.autograd.grad on the side: the training itself is the same.
    assert [m["val_loss"] for _s, m in on.reports] == [m["val_loss"] for _s, m in off.reports]


def test_b_simple_survives_a_resume_exactly(tmp_path: Path) -> None:
    whole = RecordingReporter()
    fit(config(noise_scale_every=2), whole)
    first = RecordingReporter(stop_after=1)
    fit(config(tmp_path, noise_scale_every=2), first)
    rest = RecordingReporter()
    fit(config(tmp_path, noise_scale_every=2), rest)
    # the resumed run sends the checkpoint's epoch again, then goes on: the same figures as one that never stopped
    assert noise_metrics(rest)[:1] == noise_metrics(first)
    assert noise_metrics(rest) == noise_metrics(whole)


def test_window_and_confidence_options() -> None:
    """23 steps an epoch, measured every 2nd: a 1-epoch window holds 12 measurements, a 3-epoch one all 35."""
    one, three, half = RecordingReporter(), RecordingReporter(), RecordingReporter()
    fit(config(noise_scale_every=2), one)
    fit(config(noise_scale_every=2, noise_scale_window=3), three)
    fit(config(noise_scale_every=2, noise_scale_confidence=0.5), half)
    assert noise_metrics(one)[0] == noise_metrics(three)[0]  # the same measurements after one epoch
    (b3, low3, high3, _), (_, low1, high1, _) = noise_metrics(three)[-1], noise_metrics(one)[-1]
    assert math.isfinite(b3) and high3 - low3 < high1 - low1
    for (b, low, high, _), (b_half, low_half, high_half, _) in zip(
        noise_metrics(one), noise_metrics(half), strict=True
    ):
        assert low <= low_half <= b_half <= high_half <= high  # a lower level: a narrower interval
        assert b_half == b or math.isinf(b)  # ... which may be bounded where the 90% one is not


def test_measurements_draw_their_own_batches_from_the_whole_training_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every 5th step, B of all 1438 examples (30 at the short step 45), corrected for drawing without replacement."""
    calls: list[tuple[int, int, int]] = []

    def spy(n: int, size: int, seed: int, step: int) -> torch.Tensor:
        calls.append((n, size, step))
        return measurement_batch(n, size, seed, step)

    monkeypatch.setattr(loop, "measurement_batch", spy)
    fit(config(noise_scale_every=5), RecordingReporter())
    assert calls == [(1438, 30 if step == 45 else 64, step) for step in range(0, 69, 5)]
    settings = loop.LoopSettings(epochs=1, batch_size=64, noise_scale_window=2.5, noise_scale_confidence=0.8)
    estimator = loop._noise_estimator(settings, 1438)
    assert (estimator.population, estimator.window, estimator.confidence) == (1438, 3595, 0.8)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"noise_scale_window": 0}, r"options.noise_scale_window=0: must be epochs > 0"),
        ({"noise_scale_window": "1"}, r"options.noise_scale_window='1': must be epochs > 0"),
        ({"noise_scale_confidence": 1.0}, r"options.noise_scale_confidence=1.0: must be in \(0, 1\)"),
    ],
)
def test_noise_scale_options_are_checked(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fit(config(noise_scale_every=2, **options), RecordingReporter())


def test_a_diverging_run_ends_on_its_training_loss_not_on_the_noise_measurement() -> None:
    """A learning rate far too high makes the weights non-finite; the measurement's gradient norms are NaN then. The
    trial formerly failed on them (ValueError: g_small_sq must be a finite squared norm); it now skips the measurement
    and ends as any diverging run does, on its non-finite training loss (FloatingPointError)."""
    diverged = TrialConfig(
        study="n", number=0, params={"lr": 1e6, "batch_size": 64}, seed=3, epochs=2, options={"noise_scale_every": 1}
    )
    with pytest.raises(FloatingPointError, match="training loss is nan"):
        fit(diverged, RecordingReporter())
