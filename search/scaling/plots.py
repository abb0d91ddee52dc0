"""PNG plots of a batch-size scaling sweep (matplotlib, no pyplot).

Each function draws on its own :class:`matplotlib.figure.Figure` with an Agg
canvas, writes one PNG and returns its path: no global pyplot state, no
backend switch, safe in threads and in the controller process.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from search.scaling.lr_rule import LRRuleFit
from search.scaling.mccandlish import ScalingFit
from search.scaling.numbers import approx
from search.scaling.profile import steps_band
from search.scaling.regimes import MAXIMAL_EFFICIENCY, PERFECT_EFFICIENCY, Regime, regime_boundaries

__all__ = [
    "draw_steps_to_target",
    "draw_examples_to_target",
    "plot_steps_to_target",
    "plot_examples_to_target",
    "plot_lr_rule",
    "plot_noise_scale",
    "draw_noise_scale",
    "NoiseReading",
]

REGIME_COLOURS = {
    Regime.PERFECT_SCALING: "#d9f0d3",
    Regime.DIMINISHING_RETURNS: "#fee8c8",
    Regime.MAXIMAL_DATA_PARALLELISM: "#f4cccc",
}


def _figure() -> tuple[Figure, Axes]:
    """A figure with room under its axes for the legend (:func:`_legend_below`)."""
    fig = Figure(figsize=(6.4, 5.6), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _legend_below(ax: Axes) -> None:
    """The axes' legend under them, outside the data (a legend inside hid points and the fit)."""
    handles, labels = ax.get_legend_handles_labels()
    if not labels:
        return
    longest = max(len(label) for label in labels)
    columns = max(1, min(len(labels), 5, 96 // (longest + 6)))  # about 96 characters fit across the figure
    ax.figure.legend(handles, labels, fontsize="small", loc="outside lower center", ncol=columns)


def _batch_axis(ax: Axes, x: np.ndarray) -> None:
    """Log2 x axis labelled with plain batch sizes (8, 16, ...)."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlim(x[0], x[-1])
    ax.set_xlabel("batch size B")


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def _grid(batch_sizes: Sequence[float], not_reached: Sequence[float]) -> np.ndarray:
    every = [float(b) for b in (*batch_sizes, *not_reached)]
    low, high = min(every), max(every)
    return np.geomspace(low / 1.5, high * 1.5, 200)


def _shade_regimes(ax: Axes, fit: ScalingFit, x: np.ndarray, perfect: float, maximal: float) -> None:
    b_perfect, b_maximal = regime_boundaries(fit, perfect, maximal)
    spans = [
        (Regime.PERFECT_SCALING, x[0], b_perfect),
        (Regime.DIMINISHING_RETURNS, b_perfect, b_maximal),
        (Regime.MAXIMAL_DATA_PARALLELISM, b_maximal, x[-1]),
    ]
    for regime, low, high in spans:
        low, high = max(low, x[0]), min(high, x[-1])
        if high > low:
            ax.axvspan(low, high, color=REGIME_COLOURS[regime], zorder=0, label=regime.value)


def _mark_not_reached(ax: Axes, not_reached: Sequence[float]) -> None:
    if not not_reached:
        return
    ax.plot(
        [float(b) for b in not_reached],
        [1.0] * len(not_reached),
        "x",
        color="firebrick",
        markersize=9,
        transform=ax.get_xaxis_transform(),
        clip_on=False,
        label="target not reached",
    )


def _band(fit: ScalingFit, interval: tuple[float, float], x: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The envelope of the fits with ``B_crit`` in ``interval`` (``None`` without the fit's points)."""
    if len(fit.batch_sizes) < 3:
        return None
    return steps_band(fit.batch_sizes, fit.steps, interval, x)


def _interval_label(interval: tuple[float, float], ci: float) -> str:
    low, high = interval
    return f"B_crit {ci:.0%} interval {approx(low)}–{approx(high)}"


def _draw_b_crit(
    ax: Axes,
    fit: ScalingFit,
    interval: tuple[float, float] | None,
    y: float,
    x: np.ndarray,
    colour: str,
    ci: float,
    measured: tuple[float, float],
) -> None:
    """The B_crit line and, when given, its interval as a horizontal error bar at height ``y``.

    An end outside the plotted range (``0`` or ``inf`` included) is drawn to
    the edge with an arrow head: "further than shown".
    """
    if math.isfinite(fit.b_crit) and fit.b_crit > 0:
        outside = not measured[0] <= fit.b_crit <= measured[1]
        ax.axvline(
            fit.b_crit,
            color=colour,
            linestyle=":",
            label=f"B_crit≈{approx(fit.b_crit)}" + (" (outside the measured B: extrapolated)" if outside else ""),
        )
    if interval is None:
        return
    low, high = (float(v) for v in interval)
    left, right = max(low, x[0]), min(high, x[-1])
    if right < left:  # entirely off the plotted range: say so in the legend
        ax.plot([], [], "-", color=colour, linewidth=2.5, label=_interval_label(interval, ci) + " (off the plot)")
        return
    ax.plot(
        [left, right],
        [y, y],
        "-",
        color=colour,
        linewidth=2.5,
        solid_capstyle="butt",
        label=_interval_label(interval, ci),
        zorder=4,
    )
    for end, value, marker in ((left, low, "<"), (right, high, ">")):
        open_end = value < x[0] or value > x[-1]
        ax.plot([end], [y], marker if open_end else "|", color=colour, markersize=9, zorder=4)
    if math.isfinite(fit.b_crit) and x[0] <= fit.b_crit <= x[-1]:
        ax.plot([fit.b_crit], [y], "D", color=colour, markersize=6, zorder=5)


def _draw_fit(
    ax: Axes,
    fit: ScalingFit,
    x: np.ndarray,
    interval: tuple[float, float] | None,
    ci: float,
    *,
    curve: np.ndarray,
    scale: np.ndarray | float,
    label: str,
    colour: str,
    bar_colour: str,
    minimum: float,
    points: Sequence[float],
    measured: tuple[float, float],
    minimum_label: str = "",
) -> None:
    """The fitted curve on ``ax`` with, given ``interval``, its band and the ``B_crit`` error bar.

    ``curve`` is the fit over ``x`` and ``scale`` turns steps into the plotted quantity (``1`` for
    steps, ``x`` for examples). The band is the envelope of the fits with ``B_crit`` in the interval;
    the error bar sits at twice the curve's ``minimum`` (where it crosses ``B_crit``), or at the
    median of ``points`` when there is none. With ``minimum_label``, a positive minimum is also
    drawn as a dotted horizontal line. ``measured`` is the range of the measured batch sizes: the
    curve is solid over it and dashed (extrapolated) beyond.
    """
    band = _band(fit, interval, x) if interval is not None else None
    if band is not None:
        ax.fill_between(
            x,
            band[0] * scale,
            band[1] * scale,
            color=colour,
            alpha=0.2,
            linewidth=0,
            zorder=1,
            label=f"fits with B_crit in its {ci:.0%} interval",
        )
    low, high = measured
    if x[0] < low or x[-1] > high:  # dashed where no batch size was measured, solid over the measured ones
        ax.plot(x, curve, "--", color=colour, zorder=2, label="the fit outside the measured batch sizes (extrapolated)")
    inside = (x >= low) & (x <= high)
    ax.plot(x[inside], np.asarray(curve)[inside], "-", color=colour, zorder=2, label=label)
    if minimum_label and minimum > 0:
        ax.axhline(minimum, color=colour, linestyle=":", label=minimum_label)
    height = 2 * minimum if minimum > 0 else float(np.median(points))
    _draw_b_crit(ax, fit, interval, height, x, bar_colour, ci, measured)


def draw_steps_to_target(
    ax: Axes,
    batch_sizes: Sequence[float],
    steps: Sequence[float],
    fit: ScalingFit | None = None,
    *,
    b_crit_interval: tuple[float, float] | None = None,
    ci: float = 0.9,
    not_reached: Sequence[float] = (),
    perfect: float = PERFECT_EFFICIENCY,
    maximal: float = MAXIMAL_EFFICIENCY,
) -> None:
    """The steps-to-target plot on ``ax`` (see :func:`plot_steps_to_target`)."""
    x = _grid(batch_sizes, not_reached)
    if fit is not None and fit.b_noise > 0 and math.isfinite(fit.b_noise):
        _shade_regimes(ax, fit, x, perfect, maximal)
    ax.plot(batch_sizes, steps, "o", color="black", label="best steps to target", zorder=3)
    if fit is not None:
        _draw_fit(
            ax,
            fit,
            x,
            b_crit_interval,
            ci,
            curve=np.asarray(fit.predict_steps(x)),
            scale=1,
            label=f"fit: S_min≈{approx(fit.s_min)} (its B→∞ limit: extrapolated), B_noise≈{approx(fit.b_noise)}",
            colour="tab:blue",
            bar_colour="tab:blue",
            minimum=fit.s_min,
            points=steps,
            measured=(min(batch_sizes), max(batch_sizes)),
        )
    _mark_not_reached(ax, not_reached)
    _batch_axis(ax, x)
    ax.set_yscale("log")
    ax.set_ylabel("steps to target")
    ax.set_title("Steps to target vs batch size")
    _legend_below(ax)


def plot_steps_to_target(
    path: str | Path,
    batch_sizes: Sequence[float],
    steps: Sequence[float],
    fit: ScalingFit | None = None,
    *,
    b_crit_interval: tuple[float, float] | None = None,
    ci: float = 0.9,
    not_reached: Sequence[float] = (),
    perfect: float = PERFECT_EFFICIENCY,
    maximal: float = MAXIMAL_EFFICIENCY,
) -> Path:
    """Best steps-to-target per batch size (log-log), the fitted ``S(B)`` and the regimes shaded.

    With ``b_crit_interval``: a band of the fits whose ``B_crit`` lies in the
    interval (each the best fit with ``B_noise`` held there) around the
    curve, and the interval as an error bar at ``S = 2 S_min`` (where the
    curve crosses ``B_crit``). Batch sizes in ``not_reached`` are marked
    with a red x on the top edge.
    """
    fig, ax = _figure()
    draw_steps_to_target(
        ax,
        batch_sizes,
        steps,
        fit,
        b_crit_interval=b_crit_interval,
        ci=ci,
        not_reached=not_reached,
        perfect=perfect,
        maximal=maximal,
    )
    return _save(fig, path)


def draw_examples_to_target(
    ax: Axes,
    batch_sizes: Sequence[float],
    examples: Sequence[float],
    fit: ScalingFit | None = None,
    *,
    b_crit_interval: tuple[float, float] | None = None,
    ci: float = 0.9,
    not_reached: Sequence[float] = (),
) -> None:
    """The examples-to-target plot on ``ax`` (see :func:`plot_examples_to_target`)."""
    x = _grid(batch_sizes, not_reached)
    ax.plot(batch_sizes, examples, "o", color="black", label="best examples to target", zorder=3)
    if fit is not None:
        _draw_fit(
            ax,
            fit,
            x,
            b_crit_interval,
            ci,
            curve=np.asarray(fit.predict_examples(x)),
            scale=x,
            label=f"fit: E_min≈{approx(fit.e_min)}",
            colour="tab:orange",
            bar_colour="tab:red",
            minimum=fit.e_min,
            points=examples,
            measured=(min(batch_sizes), max(batch_sizes)),
            minimum_label="E_min (its B→0 limit: extrapolated)",
        )
    _mark_not_reached(ax, not_reached)
    _batch_axis(ax, x)
    ax.set_yscale("log")
    ax.set_ylabel("examples to target")
    ax.set_title("Examples to target vs batch size")
    _legend_below(ax)


def plot_examples_to_target(
    path: str | Path,
    batch_sizes: Sequence[float],
    examples: Sequence[float],
    fit: ScalingFit | None = None,
    *,
    b_crit_interval: tuple[float, float] | None = None,
    ci: float = 0.9,
    not_reached: Sequence[float] = (),
) -> Path:
    """Best examples-to-target per batch size (log-log) and the fitted ``E(B) = E_min (1 + B/B_noise)``.

    With ``b_crit_interval``: the band of fits with ``B_crit`` in it and the
    interval as an error bar at ``E = 2 E_min``.
    """
    fig, ax = _figure()
    draw_examples_to_target(
        ax, batch_sizes, examples, fit, b_crit_interval=b_crit_interval, ci=ci, not_reached=not_reached
    )
    return _save(fig, path)


def plot_lr_rule(path: str | Path, lr_fit: LRRuleFit, *, ci: float = 0.9) -> Path:
    """Best LR per batch size (log-log) with the fitted power law, the linear and the square-root rules.

    When the exponent has a finite ``ci`` interval, the power laws with an
    exponent in it (through the fit at the batch sizes' geometric mean) are
    shaded: a rule inside the shade is not excluded by the data.
    """
    fig, ax = _figure()
    x = _grid(lr_fit.batch_sizes, ())
    ax.plot(lr_fit.batch_sizes, lr_fit.best_lrs, "o", color="black", label="best learning rate", zorder=3)
    low, high = lr_fit.alpha_interval(ci)
    if math.isfinite(low) and math.isfinite(high):
        centre = float(np.exp(np.mean(np.log(lr_fit.batch_sizes))))
        ends = [lr_fit.predict(centre) * (x / centre) ** a for a in (low, high)]
        ax.fill_between(
            x,
            np.minimum(*ends),
            np.maximum(*ends),
            color="tab:green",
            alpha=0.15,
            linewidth=0,
            label=f"exponent {ci:.0%} interval {low:.2f}–{high:.2f}",
        )
    ax.plot(x, lr_fit.predict(x), "-", color="tab:green", label=f"fit: lr ∝ B^{lr_fit.alpha:.2f}")
    ax.plot(x, lr_fit.linear_rule(x), "--", color="tab:red", label="linear rule (lr ∝ B)")
    ax.plot(x, lr_fit.sqrt_rule(x), "--", color="tab:purple", label="square-root rule (lr ∝ √B)")
    _batch_axis(ax, x)
    ax.set_yscale("log")
    ax.set_ylabel("learning rate")
    ax.set_title("Best learning rate vs batch size")
    _legend_below(ax)
    return _save(fig, path)


class NoiseReading(NamedTuple):
    """One ``B_simple`` report: the estimate and its interval; above the measurable range ``b_simple`` and
    ``high`` are ``inf`` and ``low`` is a lower bound. NaN: not reported."""

    step: float
    b_simple: float
    low: float = math.nan
    high: float = math.nan

    @property
    def above_range(self) -> bool:
        return math.isinf(self.b_simple) and self.b_simple > 0


def _readings(points: Sequence[Sequence[float]]) -> list[NoiseReading]:
    """``(step, b_simple[, low, high])`` tuples as readings; NaN estimates (too few measurements) left out."""
    readings = [NoiseReading(*(float(v) for v in p)) for p in points]
    return [r for r in readings if not math.isnan(r.b_simple)]


def draw_noise_scale(histories: Mapping[int, Sequence[Sequence[float]]]) -> Figure:
    """``B_simple`` over training, one line per batch size, its interval shaded, above-range readings marked.

    ``histories`` is ``{B: [(step, b_simple, low, high), ...]}`` (``low``/``high``
    may be left out). A reading above the measurable range is drawn as an
    upward triangle at its lower bound (no estimate and no upper end exist);
    the x axis (steps) is logarithmic when every step is positive, the legend under the axes;
    the y axis is logarithmic when every value drawn is positive (early
    estimates can be negative); a lower end (of an interval, or an above-range
    bound) that is not positive is drawn at a tenth of the smallest positive value.
    """
    fig, ax = _figure()
    drawn: list[float] = []
    above_any = False
    positive = [r.b_simple for h in histories.values() for r in _readings(h) if 0 < r.b_simple < math.inf]
    positive += [r.low for h in histories.values() for r in _readings(h) if 0 < r.low < math.inf]
    floor = min(positive) / 10 if positive else 0.0  # a non-positive interval end is drawn down to here
    for i, b in enumerate(sorted(histories)):
        readings = _readings(histories[b])
        colour = f"C{i % 10}"
        finite = [r for r in readings if math.isfinite(r.b_simple)]
        if finite:
            ax.plot([r.step for r in finite], [r.b_simple for r in finite], "-", color=colour, label=f"B={b}")
            drawn.extend(r.b_simple for r in finite)
        bounded = [r for r in finite if math.isfinite(r.low) and math.isfinite(r.high)]
        if bounded:
            ax.fill_between(
                [r.step for r in bounded],
                [max(r.low, floor) for r in bounded],
                [r.high for r in bounded],
                color=colour,
                alpha=0.15,
                linewidth=0,
            )
        above = [r for r in readings if r.above_range and math.isfinite(r.low)]
        if above:
            above_any = True
            ax.plot(
                [r.step for r in above],
                [max(r.low, floor) for r in above],
                "^",
                color=colour,
                markersize=6,
                label=None if finite else f"B={b}",
            )
            drawn.extend(max(r.low, floor) for r in above)
    if drawn and min(drawn) > 0:
        ax.set_yscale("log")
    steps = [r.step for h in histories.values() for r in _readings(h)]
    if steps and min(steps) > 0:  # the batch sizes' runs span 100x in steps: on a linear axis most were squeezed left
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: approx(v)))
    ax.set_xlabel("optimizer step" + (" (log scale)" if ax.get_xscale() == "log" else ""))
    ax.set_ylabel("B_simple = tr(Σ) / |G|²")
    ax.set_title("Gradient noise scale over training (shaded: interval)")
    if above_any:
        ax.plot([], [], "^", color="#555555", label="above range (at its lower bound)")
    if drawn:
        _legend_below(ax)
    else:
        ax.text(0.5, 0.5, "no noise-scale measurements", ha="center", va="center", transform=ax.transAxes)
    return fig


def plot_noise_scale(path: str | Path, histories: Mapping[int, Sequence[Sequence[float]]]) -> Path:
    """:func:`draw_noise_scale`, written as a PNG."""
    return _save(draw_noise_scale(histories), path)
