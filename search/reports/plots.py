"""The report's figures: matplotlib (Agg, no pyplot state) drawn to base64 PNG data URIs.

Each function takes plain data and returns ``data:image/png;base64,...``, so the
HTML report embeds every figure and needs no network and no other file.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Mapping, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from search.reports.data import Span

__all__ = [
    "STATE_COLORS",
    "lr_schedules",
    "optimization_history",
    "learning_curves",
    "importance_bars",
    "epochs_bars",
    "gantt",
    "pareto",
]

STATE_COLORS = {
    "COMPLETE": "#1f77b4",
    "PRUNED": "#ff7f0e",
    "FAIL": "#d62728",
    "RUNNING": "#7f7f7f",
    "INTERRUPTED": "#7f7f7f",
    "WAITING": "#bcbd22",
}
_DPI = 100


def _figure(width: float = 7.5, height: float = 3.6, left: float = 0.75, bottom: float = 0.55) -> Figure:
    """Fixed margins in inches: a layout engine would cost seconds per report on a busy machine."""
    fig = Figure(figsize=(width, height), dpi=_DPI)
    fig.subplots_adjust(left=left / width, right=1 - 0.2 / width, bottom=bottom / height, top=1 - 0.35 / height,
                        wspace=0.3)
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Figure) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=_DPI, metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def lr_schedules(curves: Mapping[int, tuple[list[tuple[int, float]], list[tuple[int, float]]]]) -> str:
    """Per trial: the rebuilt schedule as a line, the reported per-epoch LR as dots."""
    fig = _figure()
    ax = fig.add_subplot()
    for i, (number, (rebuilt, reported)) in enumerate(curves.items()):
        color = f"C{i % 10}"
        if rebuilt:
            ax.plot([s for s, _ in rebuilt], [lr for _, lr in rebuilt], color=color, label=f"trial {number}")
        if reported:
            ax.plot([s for s, _ in reported], [lr for _, lr in reported], "o", color=color, ms=4,
                    label=None if rebuilt else f"trial {number} (reported)")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("learning rate")
    ax.set_title("learning-rate schedule of the best trials (line: rebuilt, dots: reported per epoch)", fontsize=9)
    if any(lr > 0 for c in curves.values() for pts in c for _, lr in pts):
        ax.set_yscale("log")
    ax.legend(fontsize=8)
    return _png(fig)


def optimization_history(
    numbers: Sequence[int],
    values: Sequence[float],
    finished: Sequence[float],
    maximize: bool,
    metric: str,
) -> str:
    """Objective per trial number with the best so far, and best so far against wall time."""
    fig = _figure(9.0, 3.6)
    fig.subplots_adjust(wspace=0.35)
    left, right = fig.subplots(1, 2)
    order = sorted(range(len(numbers)), key=lambda i: numbers[i])
    xs = [numbers[i] for i in order]
    ys = [values[i] for i in order]
    left.plot(xs, ys, "o", color="#1f77b4", ms=4, label="trial")
    left.step(xs, _best_so_far(ys, maximize), where="post", color="#d62728", label="best so far")
    left.set_xlabel("trial number")
    left.set_ylabel(metric)
    left.legend(fontsize=8)
    by_time = sorted(range(len(values)), key=lambda i: finished[i])
    ts = [finished[i] for i in by_time]
    best = _best_so_far([values[i] for i in by_time], maximize)
    right.plot(ts, [values[i] for i in by_time], "o", color="#1f77b4", ms=4, alpha=0.5)
    right.step(ts, best, where="post", color="#d62728")
    right.set_xlabel("wall time since the first trial started (s)")
    right.set_ylabel(f"best {metric}")
    return _png(fig)


def _best_so_far(values: Sequence[float], maximize: bool) -> list[float]:
    out: list[float] = []
    best = -math.inf if maximize else math.inf
    for v in values:
        if math.isfinite(v):
            best = max(best, v) if maximize else min(best, v)
        out.append(best if math.isfinite(best) else math.nan)
    return out


def learning_curves(
    curves: Mapping[int, tuple[str, list[tuple[int, dict[str, float]]]]], metrics: Sequence[str]
) -> str:
    """One panel per metric: every trial's reports against the step, coloured by its state."""
    fig = _figure(min(11.0, 3.6 * len(metrics)), 3.2, left=0.6)
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics, strict=True):
        for _number, (state, history) in sorted(curves.items()):
            points = [(s, m[metric]) for s, m in history if metric in m and math.isfinite(m[metric])]
            if points:
                ax.plot([s for s, _ in points], [v for _, v in points], "-", marker=".",
                        color=STATE_COLORS.get(state, "#7f7f7f"), alpha=0.7, lw=1)
        ax.set_xlabel("step (report)")
        ax.set_title(metric, fontsize=9)
    seen = sorted({state for state, _h in curves.values()})
    axes[0].legend(handles=[Line2D([], [], color=STATE_COLORS.get(s, "#7f7f7f"), label=s.lower()) for s in seen],
                   fontsize=8)
    return _png(fig)


def importance_bars(values: Mapping[str, float], metric: str) -> str:
    fig = _figure(6.0, 0.4 * max(3, len(values)) + 1.0, left=1.6)
    ax = fig.add_subplot()
    names = list(values)[::-1]
    ax.barh(names, [values[n] for n in names], color="#2ca02c")
    ax.set_xlabel(f"importance for {metric}")
    return _png(fig)


def epochs_bars(rows: Sequence[tuple[int, float, str]], budget: int) -> str:
    """Epochs each trial trained, coloured by state, against the per-trial budget."""
    fig = _figure(7.5, 3.0)
    ax = fig.add_subplot()
    ax.bar([n for n, _, _ in rows], [e for _, e, _ in rows],
           color=[STATE_COLORS.get(s, "#7f7f7f") for _, _, s in rows])
    ax.axhline(budget, color="black", lw=0.8, ls="--")
    ax.set_xlabel("trial number")
    ax.set_ylabel("epochs trained")
    return _png(fig)


def gantt(spans: Sequence[Span]) -> str:
    """Trials per worker over time, coloured by state and labelled with the trial number."""
    workers = sorted({s.worker for s in spans})
    fig = _figure(9.0, 0.5 * len(workers) + 1.6, left=1.5)
    ax = fig.add_subplot()
    for s in spans:
        row = workers.index(s.worker)
        ax.barh(row, max(s.end - s.start, 1e-3), left=s.start, height=0.6,
                color=STATE_COLORS.get(s.state, "#7f7f7f"), edgecolor="white")
        label = f"{s.number}" + (f" [GPU {s.devices}]" if s.devices else "")
        ax.text(s.start + (s.end - s.start) / 2, row, label, ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(range(len(workers)), [w.replace("tcp://", "") for w in workers], fontsize=8)
    ax.set_xlabel("seconds since the first trial started")
    ax.invert_yaxis()
    return _png(fig)


def pareto(
    all_points: Sequence[tuple[float, float]], front: Sequence[tuple[int, float, float]], names: Sequence[str]
) -> str:
    fig = _figure(6.0, 4.0)
    ax = fig.add_subplot()
    ax.plot([x for x, _ in all_points], [y for _, y in all_points], "o", color="#aaaaaa", ms=5, label="trials")
    ordered = sorted(front, key=lambda p: p[1])
    ax.plot([x for _, x, _ in ordered], [y for _, _, y in ordered], "o-", color="#d62728", ms=6, label="Pareto front")
    for number, x, y in ordered:
        ax.annotate(str(number), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xlabel(names[0])
    ax.set_ylabel(names[1])
    ax.legend(fontsize=8)
    return _png(fig)
