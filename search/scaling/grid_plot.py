"""The figure of an ``lr_grid`` sweep (:mod:`search.scaling.lr_grid`): steps to target against the learning rate, a
curve per batch size, so that a reader sees each best rate between two worse ones (or at the edge)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

__all__ = ["GridPoint", "draw_lr_grid", "plot_lr_grid"]


@dataclasses.dataclass(frozen=True)
class GridPoint:
    """One trial: its batch size, the rate it trained with, its steps to target (``reached``) or the steps it ran."""

    batch_size: int
    lr: float
    steps: float
    reached: bool


def draw_lr_grid(points: Sequence[GridPoint]) -> Figure:
    """Per batch size its reached trials joined by a line (the best ringed); trials short of the target as ▲ at the
    steps they ran (a lower bound on what they would have needed)."""
    fig = Figure(figsize=(6.4, 5.6), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    sizes = sorted({p.batch_size for p in points})
    colours = colormaps["viridis"]
    for i, b in enumerate(sizes):
        colour = colours(i / max(1, len(sizes) - 1))
        mine = sorted((p for p in points if p.batch_size == b), key=lambda p: p.lr)
        reached = [p for p in mine if p.reached and math.isfinite(p.steps)]
        short = [p for p in mine if not p.reached and math.isfinite(p.steps) and p.steps > 0]
        ax.plot([p.lr for p in reached], [p.steps for p in reached], "o-", color=colour, label=f"B={b:,}")
        ax.plot([p.lr for p in short], [p.steps for p in short], "^", color=colour, markerfacecolor="none")
        if reached:
            best = min(reached, key=lambda p: p.steps)
            ax.plot([best.lr], [best.steps], "o", color=colour, markersize=13, markerfacecolor="none")
    ax.plot([], [], "^", color="grey", markerfacecolor="none", label="short of the target (steps run)")
    ax.plot([], [], "o", color="grey", markersize=13, markerfacecolor="none", label="best rate of its batch size")
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):  # plain numbers at 1, 2 and 5 of each decade, no crowded minor labels
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("learning rate trained with")
    ax.set_ylabel("optimizer steps to target")
    ax.set_title("Steps to target vs learning rate, per batch size")
    fig.legend(loc="outside lower center", ncols=4, fontsize="small", frameon=False)
    return fig


def plot_lr_grid(path: Path, points: Sequence[GridPoint]) -> Path:
    """:func:`draw_lr_grid` written to ``path`` (PNG)."""
    draw_lr_grid(points).savefig(path)
    return path
