"""The branching study's figure: the critical batch size at each point beside the reference's noise scale there."""

from __future__ import annotations

import math
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from search.scaling.branch_run import BranchingResult

__all__ = ["draw_critical", "plot_critical"]


def draw_critical(result: BranchingResult) -> Figure:
    """Critical batch per point (and the schedule's batch as steps), ``b_simple`` per point; both axes log."""
    fig = Figure(figsize=(6.4, 4.4), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    points = sorted(result.critical)
    ax.plot(points, [result.critical[p] for p in points], "o-", color="#b22222", label="critical batch (branches)")
    noise = [(p, result.noise_scale[p]) for p in points if math.isfinite(result.noise_scale[p])]
    if noise:
        ax.plot(*zip(*noise), "s--", color="#08519c", label="B_simple of the reference")
    starts = [max(e, points[0] / 2) for e, _, _ in result.schedule]
    ax.step(
        [*starts, points[-1] * 1.5],
        [b for _, b, _ in result.schedule] + [result.schedule[-1][1]],
        where="post",
        color="#555555",
        linewidth=1,
        label="the schedule's batch",
    )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_xlabel("epoch of the reference run (branch point)")
    ax.set_ylabel("batch size (examples)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return fig


def plot_critical(result: BranchingResult, path: Path) -> Path:
    """Write :func:`draw_critical`'s figure to ``path`` (a PNG)."""
    draw_critical(result).savefig(path)
    return path
