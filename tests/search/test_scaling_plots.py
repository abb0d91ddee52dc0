"""Scaling plots: each function writes a non-empty PNG and leaves no pyplot state behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from search.scaling.fit import ScalingFit, fit_mccandlish, lr_rule_fit
from search.scaling.plots import plot_examples_to_target, plot_lr_rule, plot_noise_scale, plot_steps_to_target

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SIZES = [8, 16, 32, 64, 128, 256]
STEPS = [500 * (1 + 100 / b) for b in SIZES]


def assert_png(path: Path) -> None:
    assert path.is_file() and path.stat().st_size > 1000
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_steps_and_examples_plots_are_written(tmp_path: Path) -> None:
    fit = fit_mccandlish(SIZES, STEPS)
    steps_png = plot_steps_to_target(tmp_path / "plots" / "steps.png", SIZES, STEPS, fit, not_reached=[512])
    examples = [b * s for b, s in zip(SIZES, STEPS, strict=True)]
    examples_png = plot_examples_to_target(tmp_path / "examples.png", SIZES, examples, fit, not_reached=[512])
    assert steps_png == tmp_path / "plots" / "steps.png"
    assert_png(steps_png)
    assert_png(examples_png)


@pytest.mark.parametrize("fit", [None, ScalingFit.from_coefficients(0.0, 64000.0), ScalingFit.from_coefficients(300, 0)])
def test_steps_plot_without_a_fit_or_with_an_unbounded_one(tmp_path: Path, fit: ScalingFit | None) -> None:
    assert_png(plot_steps_to_target(tmp_path / "steps.png", SIZES, STEPS, fit))


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


def test_plots_do_not_touch_pyplot(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from search.scaling.fit import lr_rule_fit\n"
        "from search.scaling.plots import plot_lr_rule\n"
        f"plot_lr_rule({str(tmp_path / 'lr.png')!r}, lr_rule_fit([8, 16, 32], [0.1, 0.2, 0.4]))\n"
        "print('matplotlib.pyplot' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
    assert_png(tmp_path / "lr.png")
