"""The report's figures: matplotlib (Agg, no pyplot state) drawn to base64 PNG data URIs.

Each function takes plain data and returns ``data:image/png;base64,...``, so the
HTML report embeds every figure and needs no network and no other file.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, PathPatch
from matplotlib.path import Path as MplPath
from matplotlib.text import Text
from matplotlib.ticker import MaxNLocator
from matplotlib.transforms import blended_transform_factory

from search.reports.axis_limits import robust_limits
from search.reports.run_labels import LABEL_HIGH_PX, run_labels
from search.reports.step_axis import REPORTED, curve_axis, curve_x
from search.reports.timing import Span, TimeAxis, bar_heights, resized_trials

__all__ = [
    "STATE_COLORS",
    "Drawn",
    "lr_curves",
    "optimization_history",
    "learning_curves",
    "importance_bars",
    "epochs_bars",
    "gantt",
    "pareto",
    "clipped",
]

STATE_COLORS = {
    "COMPLETE": "#1f77b4",
    "PRUNED": "#ff7f0e",
    "FAIL": "#d62728",
    "RUNNING": "#7f7f7f",
    "INTERRUPTED": "#7f7f7f",
    "WAITING": "#bcbd22",
}
WAIT_COLOR = "#e6e6e6"
HIGHLIGHT_COLORS = ("#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#000000", "#393b79")  # no state's
FEW_CURVES = 10  # up to this many trials, the learning curves name every trial
MANY_BARS = 2_000  # more trials than this: the epochs figure draws a dot per trial (a bar would be under a pixel)
TALL_ROWS = 60  # the timeline grows a row per worker up to this many, then packs the rows and names some
_DPI = 100


@dataclasses.dataclass(frozen=True)
class Drawn:
    """A figure as a PNG data URI, and the legend entries it shows (the page repeats them as text)."""

    uri: str
    legend: tuple[str, ...] = ()
    figure: Figure | None = dataclasses.field(default=None, repr=False, compare=False)  # drawn, for checks


def _figure(width: float = 7.5, height: float = 3.6) -> Figure:
    """Constrained layout: every tick label, axis label, title and legend fits inside the figure."""
    fig = Figure(figsize=(width, height), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Figure) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=_DPI, metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _drawn(fig: Figure, legend: Sequence[str] = ()) -> Drawn:
    return Drawn(_png(fig), tuple(legend), fig)


def _integer_ticks(axis: Any) -> None:
    """Trial numbers, steps and epochs: whole numbers only on this axis (no 2.5)."""
    axis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))  # one report: the one integer tick


def clipped(fig: Figure) -> list[str]:
    """The visible texts of a drawn figure that reach outside it (by more than a pixel): should be none."""
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    box = fig.bbox
    skip = _undrawn_tick_labels(fig)
    out = []
    for text in fig.findobj(Text):
        if id(text) in skip or not text.get_visible() or not text.get_text().strip():
            continue
        if text.axes is not None and not text.axes.get_visible():
            continue
        extent = text.get_window_extent(renderer)
        if extent.x0 < box.x0 - 1 or extent.y0 < box.y0 - 1 or extent.x1 > box.x1 + 1 or extent.y1 > box.y1 + 1:
            out.append(text.get_text())
    return out


def _undrawn_tick_labels(fig: Figure) -> set[int]:
    """Tick labels matplotlib keeps but does not draw: their tick lies outside the axis' view."""
    skip = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            tol = 1e-9 * max(1.0, abs(hi - lo))
            for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
                loc = tick.get_loc()
                if loc is None or not lo - tol <= loc <= hi + tol or not tick.get_visible():
                    skip.update({id(tick.label1), id(tick.label2)})
    return skip


def _cut_marks(ax: Any, cuts: Sequence[tuple[float, float]]) -> list[str]:
    """A dashed line where an idle gap between runs was cut from a time axis, its length written beside it."""
    labels = []
    lo, hi = ax.get_xlim()
    for at, seconds in cuts:
        ax.axvline(at, color="#555555", lw=1.2, ls=(0, (4, 2)), zorder=4)
        right = at > (lo + hi) / 2  # the note on the side with room
        ax.text(
            at,
            0.98,
            f" {_duration(seconds)} idle cut ",
            transform=blended_transform_factory(ax.transData, ax.transAxes),
            ha="right" if right else "left",
            va="top",
            fontsize=7,
            color="#333333",
            zorder=5,
        )
        labels.append(f"dashed line: {_duration(seconds)} idle between runs, cut from the axis")
    return labels


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def lr_curves(curves: Mapping[int, tuple[Sequence[tuple[int, float]], str]], reported_x: str = REPORTED) -> Drawn:
    """Per trial: the learning rate it followed, by source (``reported`` by the trainer, against ``reported_x``
    (:func:`search.reports.step_axis.step_label`), or ``rebuilt``, against the optimizer step)."""
    fig = _figure(9.0, 4.0)
    ax = fig.add_subplot()
    legend = []
    for i, (number, (points, source)) in enumerate(curves.items()):
        if not points:
            continue
        label = f"trial {number} ({'reported by the trainer' if source == 'reported' else 'rebuilt from the rules'})"
        ax.plot(
            [s for s, _ in points],
            [lr for _, lr in points],
            "-" if source == "rebuilt" else "o-",
            color=f"C{i % 10}",
            ms=4,
            lw=1.5,
            label=label,
        )
        legend.append(label)
    sources = {source for points, source in curves.values() if points}
    ax.set_xlabel(
        {"reported": reported_x, "rebuilt": "optimizer step"}.get(
            next(iter(sources)) if len(sources) == 1 else "", f"reported: {reported_x}; rebuilt: optimizer step"
        )
    )
    ax.set_ylabel("learning rate")
    if all(lr > 0 for points, _s in curves.values() for _, lr in points):
        ax.set_yscale("log")
    _integer_ticks(ax.xaxis)
    fig.legend(fontsize=8, loc="outside lower center", ncol=min(3, max(1, len(legend))))  # off the curves
    return _drawn(fig, legend)


def optimization_history(
    complete: Sequence[tuple[int, float, float]],
    pruned: Sequence[tuple[int, float | None]],
    failed: Sequence[int],
    maximize: bool,
    metric: str,
    cuts: Sequence[tuple[float, float]] = (),
    infeasible: Sequence[tuple[int, float]] = (),
    front: Sequence[int] | None = None,
) -> Drawn:
    """Objective per trial number with the best so far, pruned and failed trials marked; best against wall time.

    ``front``: the Pareto front's trial numbers of a multi-objective study, which has no best so far in one
    objective: its trials are ringed instead, and the right panel shows the values against wall time.

    ``complete``: (number, value, seconds to its end); ``pruned``: (number, last reported
    value or None); ``failed``: numbers. A trial with no value sits on the bottom edge.
    ``cuts``: the idle gaps between runs cut from the time axis (:meth:`TimeAxis.marks`), marked on it.
    ``infeasible``: (number, value) of complete trials that break ``[study] constraints``: drawn
    hollow, and not in the best so far.
    """
    fig = _figure(10.0, 4.2)
    left, right = fig.subplots(1, 2)
    ordered = sorted(complete)
    xs = [n for n, _v, _t in ordered]
    ys = [v for _n, v, _t in ordered]
    legend = []
    edge = blended_transform_factory(left.transData, left.transAxes)  # x: trial number, y: bottom edge
    label = f"{'feasible' if infeasible else 'complete'} ({len(ordered)})"
    left.plot(xs, ys, "o", color=STATE_COLORS["COMPLETE"], ms=5, label=label)
    legend.append(label)
    if infeasible:
        label = f"infeasible ({len(infeasible)}): breaks [study] constraints"
        left.plot(
            [n for n, _ in infeasible], [v for _, v in infeasible], "o", mfc="none", color="#7f7f7f", ms=5, label=label
        )
        legend.append(label)
    valued = [(n, v) for n, v in pruned if v is not None and math.isfinite(v)]
    bare = [n for n, v in pruned if v is None or not math.isfinite(v)]
    if pruned:
        label = f"pruned ({len(pruned)}): last reported value" + (", none: bottom edge" if bare else "")
        left.plot([n for n, _ in valued], [v for _, v in valued], "v", color=STATE_COLORS["PRUNED"], ms=6, label=label)
        left.plot(bare, [0.03] * len(bare), "v", color=STATE_COLORS["PRUNED"], ms=6, transform=edge, clip_on=False)
        legend.append(label)
    if failed:
        label = f"failed ({len(failed)}): no value, bottom edge"
        left.plot(
            sorted(failed),
            [0.03] * len(failed),
            "x",
            color=STATE_COLORS["FAIL"],
            ms=7,
            mew=2,
            transform=edge,
            clip_on=False,
            label=label,
        )
        legend.append(label)
    if xs and front is not None:
        on = [(n, v) for n, v, _t in ordered if n in set(front)]
        label = f"on the Pareto front ({len(on)})"
        left.plot([n for n, _ in on], [v for _, v in on], "o", mfc="none", mec="#d62728", ms=10, mew=1.6, label=label)
        legend.append(label)
    elif xs:
        last = max([*xs, *(n for n, _ in pruned), *failed, *(n for n, _ in infeasible)])
        best = _best_so_far(ys, maximize)
        left.step([*xs, last], [*best, best[-1]], where="post", color="#2ca02c", lw=2, label="best so far")
        legend.append("best so far")
    left.set_xlabel("trial number")
    _integer_ticks(left.xaxis)
    left.set_ylabel(metric)
    left.set_title(f"{metric} per trial ({'higher' if maximize else 'lower'} is better)", fontsize=9)
    left.legend(fontsize=8, loc="best")  # where it hides the fewest points
    by_time = sorted(ordered, key=lambda c: c[2])
    ts = [t for _n, _v, t in by_time]
    right.plot(ts, [v for _n, v, _t in by_time], "o", color=STATE_COLORS["COMPLETE"], ms=4, alpha=0.5)
    right.set_xlabel(
        "run time (s), idle gaps between runs cut" if cuts else "run time since the first trial started (s)"
    )
    if front is not None:
        ringed = [(t, v) for n, v, t in by_time if n in set(front)]
        right.plot([t for t, _ in ringed], [v for _, v in ringed], "o", mfc="none", mec="#d62728", ms=9, mew=1.4)
        right.set_ylabel(metric)
        right.set_title(f"{metric} against run time (Pareto front ringed)", fontsize=9)
        legend += _cut_marks(right, cuts)
        return _drawn(fig, legend)
    right.step(ts, _best_so_far([v for _n, v, _t in by_time], maximize), where="post", color="#2ca02c", lw=2)
    right.set_ylabel(f"best {metric}")
    right.set_title(f"best so far against run time ({'feasible' if infeasible else 'complete'} trials)", fontsize=9)
    legend += _cut_marks(right, cuts)
    return _drawn(fig, legend)


def _best_so_far(values: Sequence[float], maximize: bool) -> list[float]:
    out: list[float] = []
    best = -math.inf if maximize else math.inf
    for v in values:
        if math.isfinite(v):
            best = max(best, v) if maximize else min(best, v)
        out.append(best if math.isfinite(best) else math.nan)
    return out


def learning_curves(
    curves: Mapping[int, tuple[str, list[tuple[int, dict[str, float]]]]],
    metrics: Sequence[str],
    highlight: Sequence[int] = (),
    ranked: bool = True,
) -> Drawn:
    """One panel per metric (two per row): every trial's reports against the step (the epoch; the examples seen
    where the trials' steps count different numbers of them: :func:`search.reports.step_axis.curve_axis`).

    Trials in ``highlight`` (the best, in order) are drawn thick, in colours no state
    uses, and named in the legend with their rank (``ranked`` False: a Pareto front, which has none: "front");
    the others are thin and coloured by state. With few trials every trial is named. A panel's y axis
    stops short of values far out of the rest's range (a diverged trial's loss): those points are left out,
    a triangle on the edge marks each trial cut, and the legend says so.
    """
    cols = 1 if len(metrics) == 1 else 2
    rows = math.ceil(len(metrics) / cols)
    fig = _figure(11.0, 4.6 * rows)
    axes = list(fig.subplots(rows, cols, squeeze=False).flat)
    x_label = curve_axis(history for _state, history in curves.values())
    named = list(highlight) if len(curves) > FEW_CURVES else sorted(curves)
    palette = HIGHLIGHT_COLORS if len(named) < len(curves) else [f"C{i}" for i in range(10)]  # others: state colours
    colors = {n: palette[i % len(palette)] for i, n in enumerate(named)}
    rank = {n: i for i, n in enumerate(highlight, 1)}
    legend: list[str] = []
    legend_cut: list[str] = []
    order: dict[str, tuple[int, int]] = {}  # the best first, by rank; then by trial number
    for ax, metric in zip(axes, metrics, strict=False):
        for number, (state, history) in sorted(curves.items(), key=lambda c: c[0] in rank):
            points = [
                (curve_x(x_label, s, m), m[metric]) for s, m in history if metric in m and math.isfinite(m[metric])
            ]
            if not points:
                continue
            xs, ys = [s for s, _ in points], [v for _, v in points]
            if number in colors:
                label = (
                    f"trial {number}"
                    + ((f" (#{rank[number]})" if ranked else " (front)") if number in rank else "")
                    + (f" {state.lower()}" if state != "COMPLETE" else "")
                )
                ax.plot(
                    xs,
                    ys,
                    "-",
                    marker=".",
                    color=colors[number],
                    lw=2.2 if number in rank else 1.2,
                    label=label,
                    zorder=3,
                )
                if label not in legend:
                    legend.append(label)
                    order[label] = (0, rank[number]) if number in rank else (1, number)
            else:
                ax.plot(xs, ys, "-", color=STATE_COLORS.get(state, "#7f7f7f"), alpha=0.35, lw=0.9)
        ax.set_xlabel(x_label)
        _integer_ticks(ax.xaxis)
        cut = robust_limits(ax, curves, metric)
        ax.set_title(metric + (" (axis cut, see below)" if cut else ""), fontsize=10)
        if cut:
            legend_cut.append(f"{metric}: {cut}")
    for ax in axes[len(metrics) :]:
        ax.set_visible(False)
    pairs = sorted(zip(*axes[0].get_legend_handles_labels(), strict=True), key=lambda hl: order.get(hl[1], (2, 0)))
    handles = [h for h, _l in pairs]
    legend = [label for _h, label in pairs]
    others = sorted({state for n, (state, _h) in curves.items() if n not in colors})
    handles += [
        Line2D([], [], color=STATE_COLORS.get(s, "#7f7f7f"), alpha=0.6, label=f"other trials: {s.lower()}")
        for s in others
    ]
    legend += [f"other trials: {s.lower()}" for s in others]
    if handles:  # under the panels, off the data
        fig.legend(handles=handles, fontsize=8, loc="outside lower center", ncol=min(4, len(handles)))
    return _drawn(fig, legend + legend_cut)


def importance_bars(values: Mapping[str, float], metric: str) -> Drawn:
    fig = _figure(6.0, 0.4 * max(3, len(values)) + 1.0)
    ax = fig.add_subplot()
    names = list(values)[::-1]
    ax.barh(names, [values[n] for n in names], color="#2ca02c")
    ax.set_xlabel(f"importance for {metric}")
    return _drawn(fig)


def epochs_bars(rows: Sequence[tuple[int, float, str]], budget: int) -> Drawn:
    """Epochs each trial trained, coloured by state, against the per-trial budget: a bar per trial, or beyond
    :data:`MANY_BARS` trials (bars narrower than a pixel) a dot per trial."""
    fig = _figure(7.5, 3.0)
    ax = fig.add_subplot()
    if len(rows) <= MANY_BARS:
        _rectangles(
            ax,
            [(n - 0.4, 0.0, 0.8, e) for n, e, _ in rows],
            [STATE_COLORS.get(s, "#7f7f7f") for _, _, s in rows],
            linewidth=0,
        )
    else:
        for state in dict.fromkeys(s for _, _, s in rows):
            mine = [(n, e) for n, e, s in rows if s == state]
            ax.plot(
                [n for n, _ in mine], [e for _, e in mine], "s", ms=1.5, mew=0, color=STATE_COLORS.get(state, "#7f7f7f")
            )
    ax.set_ylim(bottom=0)
    ax.axhline(budget, color="black", lw=0.8, ls="--")
    ax.set_xlabel("trial number")
    ax.set_ylabel("epochs trained")
    _integer_ticks(ax.xaxis)
    _integer_ticks(ax.yaxis)
    return _drawn(fig)


def _rectangles(
    ax: Any, boxes: Sequence[tuple[float, float, float, float]] | np.ndarray, colors: Sequence[str], **style: Any
) -> None:
    """Rectangles (left, bottom, width, height), one compound path per colour: matplotlib's ``bar`` makes an
    artist per bar, which at 20,000 trials costs minutes to add and draw; a path per colour costs a fraction of a
    second at 100,000. ``style``: the patches' properties (edgecolor, linewidth, hatch, zorder)."""
    every = np.asarray(boxes, dtype=float)
    if not len(every):
        return
    names = np.asarray(colors)
    for color in dict.fromkeys(colors):  # in order of first use: the same drawing order at every render
        x, y, w, h = every[names == color].T
        corners = np.stack([np.stack(c, 1) for c in ((x, y), (x, y + h), (x + w, y + h), (x + w, y), (x, y))], 1)
        codes = np.tile(_BOX_CODES, len(x))
        ax.add_artist(PathPatch(MplPath(corners.reshape(-1, 2), codes), facecolor=color, **style))
    ax.update_datalim(
        [(every[:, 0].min(), every[:, 1].min()), ((every[:, 0] + every[:, 2]).max(), (every[:, 1] + every[:, 3]).max())]
    )
    ax.autoscale_view()


_BOX_CODES = np.array(
    [MplPath.MOVETO, MplPath.LINETO, MplPath.LINETO, MplPath.LINETO, MplPath.CLOSEPOLY], dtype=np.uint8
)


def gantt(spans: Sequence[Span], labels: Mapping[str, str], axis: TimeAxis | None = None) -> Drawn:
    """Trials per worker over time: a bar per run coloured by state, labelled with the trial number where it fits
    (and, for a trial in segments that changed width, each segment's width: ``7 ×2``; where the segments ran at
    different widths, each bar's height grows with its width, the narrower drawn over the wider).

    A light hatched bar before a run is its wait between being asked and starting on
    the worker (queue, dispatch, worker start-up); runs are drawn over it. ``axis`` cuts
    the idle gaps between the runs of a resumed campaign; a dashed line marks each cut.
    """
    axis = axis or TimeAxis()
    workers = sorted({s.worker for s in spans})
    fig = _figure(10.0, 0.55 * min(len(workers), TALL_ROWS) + 2.2)
    ax = fig.add_subplot()
    x0 = axis(min((s.asked if s.asked is not None else s.start) for s in spans))
    x1 = axis(max(s.end for s in spans))
    ax.set_xlim(x0, x1 + 0.01 * (x1 - x0 or 1.0))
    px_per_s = fig.get_figwidth() * 0.85 * _DPI / ((x1 - x0) or 1.0)  # about: the axes take most of the width
    rows = {w: i for i, w in enumerate(workers)}
    row = np.array([rows[s.worker] for s in spans], dtype=float)
    start, end = axis.of(np.array([s.start for s in spans])), axis.of(np.array([s.end for s in spans]))
    asked = np.array([s.asked if s.asked is not None and s.waited > 0 else np.nan for s in spans])
    waits = ~np.isnan(asked)
    asked = axis.of(np.where(waits, asked, 0.0))
    heights = bar_heights(spans)  # a segment's width, where they differ; the narrower drawn over the wider
    _rectangles(  # drawn under the runs, each as tall as its run
        ax,
        np.stack([asked, row - heights / 2, start - asked, heights], 1)[waits],
        [WAIT_COLOR] * int(waits.sum()),
        hatch="///",
        edgecolor="#bbbbbb",
        linewidth=0,
        zorder=1,
    )
    boxes = np.stack([start, row - heights / 2, np.maximum(end - start, 3 / px_per_s), heights], 1)  # 1 ms shows
    colors = np.array([STATE_COLORS.get(s.state, "#7f7f7f") for s in spans])
    for level, height in enumerate(sorted(set(heights.tolist()), reverse=True)):
        _rectangles(
            ax,
            boxes[heights == height],
            list(colors[heights == height]),
            edgecolor="white",
            linewidth=1.0 if np.median(end - start) * px_per_s >= 4 else 0.0,  # thinner: white edges, nothing else
            zorder=2 + level / 10,
        )
    waited = bool(waits.any())
    px_per_row = fig.get_figheight() * 0.6 * _DPI / max(1, min(len(workers), TALL_ROWS))  # about, as px_per_s
    tall = np.flatnonzero(heights * px_per_row >= LABEL_HIGH_PX)
    run_labels(ax, spans, row, start, end, px_per_s, tall, _DPI)
    shown = range(0, len(workers), math.ceil(len(workers) / TALL_ROWS))  # every worker up to TALL_ROWS of them
    ax.set_yticks(shown, [labels.get(workers[i], workers[i]) for i in shown], fontsize=9)
    ax.set_xlabel(
        "run time since the first trial was asked (s)" + (", idle gaps between runs cut" if axis.gaps else "")
    )
    ax.invert_yaxis()
    states = sorted({s.state for s in spans}, key=lambda st: list(STATE_COLORS).index(st) if st in STATE_COLORS else 99)
    handles: list[Any] = [
        Patch(color=STATE_COLORS.get(st, "#7f7f7f"), label=f"running, ended {st.lower()}") for st in states
    ]
    if waited:
        handles.append(
            Patch(
                facecolor=WAIT_COLOR,
                hatch="///",
                edgecolor="#bbbbbb",
                label="waiting: asked -> started (queue, worker start-up)",
            )
        )
    if any(s.width is not None and (s.width > 1 or s.number in resized_trials(spans)) for s in spans):
        thick = len(set(heights.tolist())) > 1
        handles.append(
            Patch(
                color="none",
                label="N \u00d7k: trial N's segment on k slots" + ("; a taller bar, more slots" if thick else ""),
            )
        )
    cuts = _cut_marks(ax, axis.marks())
    if cuts:
        handles.append(Line2D([], [], color="#555555", lw=1.2, ls=(0, (4, 2)), label="idle between runs, cut"))
    ax.legend(
        handles=handles,
        fontsize=8,
        loc="lower left",
        bbox_to_anchor=(0.0, 1.01),
        ncol=min(3, len(handles)),
        frameon=False,
    )
    return _drawn(fig, [h.get_label() for h in handles] + cuts)


def pareto(
    all_points: Sequence[tuple[float, float]], front: Sequence[tuple[int, float, float]], names: Sequence[str]
) -> Drawn:
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
    return _drawn(fig)
