"""Scaling plots: each function writes a non-empty PNG and leaves no pyplot state behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure

from search.scaling.fit import ScalingFit, bootstrap_b_crit, fit_mccandlish, lr_rule_fit
from search.scaling.numbers import approx
from search.scaling.plots import (
    draw_examples_to_target,
    draw_noise_scale,
    draw_steps_to_target,
    plot_examples_to_target,
    plot_lr_rule,
    plot_noise_scale,
    plot_steps_to_target,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SIZES = [8, 16, 32, 64, 128, 256]
STEPS = [500 * (1 + 100 / b) for b in SIZES]
NOISY = [s * f for s, f in zip(STEPS, [1.04, 0.97, 1.02, 0.95, 1.05, 0.99], strict=True)]


def assert_png(path: Path) -> None:
    assert path.is_file() and path.stat().st_size > 1000
    assert path.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.slow
def test_steps_and_examples_plots_are_written(tmp_path: Path) -> None:
    fit = fit_mccandlish(SIZES, NOISY)
    interval = bootstrap_b_crit(SIZES, NOISY, n_boot=200, seed=0)
    steps_png = plot_steps_to_target(
        tmp_path / "plots" / "steps.png", SIZES, NOISY, fit, b_crit_interval=interval, not_reached=[512]
    )
    examples = [b * s for b, s in zip(SIZES, NOISY, strict=True)]
    examples_png = plot_examples_to_target(
        tmp_path / "examples.png", SIZES, examples, fit, b_crit_interval=interval, not_reached=[512]
    )
    assert steps_png == tmp_path / "plots" / "steps.png"
    assert_png(steps_png)
    assert_png(examples_png)


@pytest.mark.parametrize(
    "fit", [None, ScalingFit.from_coefficients(0.0, 64000.0), ScalingFit.from_coefficients(300, 0)]
)
def test_steps_plot_without_a_fit_or_with_an_unbounded_one(tmp_path: Path, fit: ScalingFit | None) -> None:
    assert_png(plot_steps_to_target(tmp_path / "steps.png", SIZES, STEPS, fit))


def _labels(fig: Figure) -> list[str]:
    """The texts of the figure's legend (it stands under the axes, not on them)."""
    assert fig.axes[0].get_legend() is None and len(fig.legends) == 1
    return [str(t.get_text()) for t in fig.legends[0].get_texts()]


@pytest.mark.parametrize("draw", [draw_steps_to_target, draw_examples_to_target])
def test_the_b_crit_interval_is_drawn_as_a_band_and_an_error_bar(draw) -> None:  # type: ignore[no-untyped-def]
    fit = fit_mccandlish(SIZES, NOISY)
    low, high = bootstrap_b_crit(SIZES, NOISY, n_boot=200, seed=0)
    assert low < fit.b_crit < high
    fig = Figure()
    values = NOISY if draw is draw_steps_to_target else [b * s for b, s in zip(SIZES, NOISY, strict=True)]
    draw(fig.add_subplot(), SIZES, values, fit, b_crit_interval=(low, high))
    labels = _labels(fig)
    assert "fits with B_crit in its 90% interval" in labels
    assert f"B_crit 90% interval {approx(low)}–{approx(high)}" in labels
    band = [c for c in fig.axes[0].collections if isinstance(c, PolyCollection)]
    assert len(band) == 1
    bar = [line for line in fig.axes[0].lines if line.get_label().startswith("B_crit 90% interval")][0]
    assert tuple(bar.get_xdata()) == pytest.approx((low, high))
    # without an interval: the curve and B_crit only
    fig = Figure()
    draw(fig.add_subplot(), SIZES, values, fit)
    assert not any("interval" in label for label in _labels(fig))


def test_an_interval_open_above_or_off_the_plot_says_so() -> None:
    fit = fit_mccandlish(SIZES, NOISY)
    fig = Figure()
    draw_steps_to_target(fig.add_subplot(), SIZES, NOISY, fit, b_crit_interval=(60.0, float("inf")))
    assert "B_crit 90% interval 60–∞" in _labels(fig)
    halving = fit_mccandlish([8, 16, 32, 64], [8000, 4100, 2000, 1000])
    fig = Figure()
    draw_steps_to_target(
        fig.add_subplot(), [8, 16, 32, 64], [8000, 4100, 2000, 1000], halving, b_crit_interval=(1017.0, float("inf"))
    )
    assert "B_crit 90% interval 1,020–∞ (off the plot)" in _labels(fig)  # as the conclusion writes it


def test_lr_and_noise_scale_plots_are_written(tmp_path: Path) -> None:
    lr_fit = lr_rule_fit(SIZES, [0.01 * (b / 8) ** 0.6 for b in SIZES])
    assert_png(plot_lr_rule(tmp_path / "lr.png", lr_fit))
    histories = {
        8: [(s, 50 + 10 * np.sin(s / 20)) for s in range(0, 500, 10)],
        64: [(s, -3.0 if s == 0 else 80.0 + s / 10) for s in range(0, 500, 10)],  # a negative early estimate
        128: [(0, float("nan"))],
    }
    assert_png(plot_noise_scale(tmp_path / "noise.png", histories))
    assert_png(plot_noise_scale(tmp_path / "empty.png", {}))


@pytest.mark.slow
def test_plots_do_not_touch_pyplot(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from search.scaling.fit import lr_rule_fit\n"
        "from search.scaling.plots import plot_lr_rule\n"
        f"plot_lr_rule({str(tmp_path / 'lr.png')!r}, lr_rule_fit([8, 16, 32], [0.1, 0.2, 0.4]))\n"
        "print('matplotlib.pyplot' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
    assert_png(tmp_path / "lr.png")


def _overlap(fig: Figure) -> float:
    """The area the figure's legend shares with its axes, in display units (after a draw)."""
    fig.canvas.draw()
    legend = fig.legends[0].get_window_extent()
    axes = fig.axes[0].get_window_extent()
    width = min(legend.x1, axes.x1) - max(legend.x0, axes.x0)
    height = min(legend.y1, axes.y1) - max(legend.y0, axes.y0)
    return max(width, 0) * max(height, 0)


@pytest.mark.slow
def test_legends_stand_outside_the_data_and_the_noise_steps_are_logarithmic(tmp_path: Path) -> None:
    """A legend on the axes hid the B=256 point of a sweep; a linear step axis squeezed 6 of 9 batch sizes'
    noise readings into its left 5%."""
    from search.scaling.plots import _figure

    fit = fit_mccandlish(SIZES, NOISY)
    fig, ax = _figure()
    draw_steps_to_target(ax, SIZES, NOISY, fit, b_crit_interval=bootstrap_b_crit(SIZES, NOISY, n_boot=200, seed=0))
    assert _overlap(fig) == 0
    histories = {b: [(s, 100.0 + s / 100) for s in range(4096 // b, 40 * 4096 // b, 4096 // b)] for b in SIZES}
    fig = draw_noise_scale(histories)
    assert fig.axes[0].get_xscale() == "log" and fig.axes[0].get_xlabel() == "optimizer step (log scale)"
    assert _labels(fig)[:2] == ["B=8", "B=16"] and _overlap(fig) == 0
