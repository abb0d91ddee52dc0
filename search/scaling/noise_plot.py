"""The figure of :mod:`search.scaling.noise_check`: the measured noise scale per batch size against ``B_crit``."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from search.scaling.noise_check import FACTOR, NoisePrediction
from search.scaling.numbers import approx

__all__ = ["draw_noise_vs_b_crit", "plot_noise_vs_b_crit"]


def draw_noise_vs_b_crit(p: NoisePrediction) -> Figure:
    """Per batch size the best run's mean ``B_simple`` (bars: the mean of its readings' ends; an arrow: open),
    their median with its order-statistic interval, and ``B_crit`` with its interval and the factor-of-2 band around it."""
    fig = Figure(figsize=(6.4, 5.4), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    sizes = np.array(sorted(p.runs), dtype=float)
    runs = [p.runs[int(b)] for b in sizes]
    values = [r.mean for r in runs] + [p.b_crit, *(v for v in (*p.b_crit_interval, *p.b_simple_interval))]
    shown = [v for v in values if 0 < v < math.inf]
    top, bottom = max(shown) * 3, min(shown) / 3
    x_lo, x_hi = sizes[0] / 2, sizes[-1] * 2
    c_lo, c_hi = p.b_crit_interval
    ax.axhspan(max(c_lo, bottom), min(c_hi, top), color="#f4cccc", alpha=0.6, linewidth=0)
    ax.axhline(p.b_crit, color="#b22222", linewidth=2, label=f"B_crit≈{approx(p.b_crit)} (fit of steps to target)")
    ax.plot([], [], "s", color="#f4cccc", markersize=10, label=f"B_crit {p.ci:.0%} interval")
    for factor in (FACTOR, 1 / FACTOR):
        ax.axhline(p.b_crit * factor, color="#b22222", linestyle=":", linewidth=1)
    ax.plot([], [], ":", color="#b22222", label=f"B_crit ×{FACTOR:g} and ÷{FACTOR:g}")
    s_lo, s_hi = p.b_simple_interval
    ax.axhspan(max(s_lo, bottom), min(s_hi, top), color="#c6dbef", alpha=0.6, linewidth=0)
    ax.axhline(p.b_simple, color="#08519c", linestyle="--", label=f"B_simple, median of the runs ≈{approx(p.b_simple)}")
    ax.plot([], [], "s", color="#c6dbef", markersize=10, label=f"its {p.ci:.0%} interval (order statistics)")
    for b, r in zip(sizes, runs, strict=True):
        low, high = max(r.low, bottom), min(r.high, top)
        ax.plot([b, b], [low, high], "-", color="#08519c", linewidth=1.5)
        if math.isinf(r.high):
            ax.plot([b], [top], "^", color="#08519c", markersize=7)
    ax.plot(
        sizes,
        [r.mean for r in runs],
        "o",
        color="#08519c",
        label="B_simple, mean over each best run",
    )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(bottom, top)
    ax.set_xlabel("batch size B of the run that measured B_simple")
    ax.set_ylabel("batch size (examples)")
    verdict = "within" if p.within else "not within"
    settled = "the intervals settle it" if p.settled else "the intervals leave it open"
    ax.set_title(f"B_crit / B_simple = {p.ratio:.2f}: {verdict} a factor of {FACTOR:g}; {settled}", fontsize="medium")
    fig.legend(*ax.get_legend_handles_labels(), fontsize="small", loc="outside lower center", ncol=2)
    return fig


def plot_noise_vs_b_crit(path: str | Path, p: NoisePrediction) -> Path:
    """:func:`draw_noise_vs_b_crit`, written as a PNG."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    draw_noise_vs_b_crit(p).savefig(path, format="png")
    return path
