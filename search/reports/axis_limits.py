"""A learning-curve axis that one diverged trial does not stretch: the values far above the rest are cut off,
and the cut is marked on the figure and said in words."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from matplotlib.transforms import blended_transform_factory

__all__ = ["ROBUST_FENCE", "robust_limits"]

ROBUST_FENCE = 3.0  # interquartile ranges above the upper quartile a learning-curve axis still shows


def robust_limits(ax: Any, curves: Mapping[int, tuple[str, list[tuple[int, dict[str, float]]]]], metric: str) -> str:
    """Stop ``ax``'s y axis short of values far above the rest (a diverged trial's loss), so that one trial does
    not flatten the others: above :data:`ROBUST_FENCE` interquartile ranges over the upper quartile of all the
    trials' reports, only where those values come from at most a quarter of the trials and cutting them at
    least halves the axis. Each trial cut gets a triangle on the top edge. Returns what was cut ("" nothing)."""
    per_trial = {
        n: [(x, m[metric]) for x, m in h if metric in m and math.isfinite(m[metric])] for n, (_s, h) in curves.items()
    }
    values = np.array([v for points in per_trial.values() for _x, v in points])
    if len(values) < 4:
        return ""
    q1, q3 = np.percentile(values, [25, 75])
    fence = q3 + ROBUST_FENCE * (q3 - q1)
    low, top = float(values.min()), float(values.max())
    kept = values[values <= fence]
    cut = sorted(n for n, points in per_trial.items() if any(v > fence for _x, v in points))
    if not cut or len(cut) > max(1, len(per_trial) // 4) or 2 * (float(kept.max()) - low) > top - low:
        return ""
    high = float(kept.max())
    pad = 0.05 * ((high - low) or abs(high) or 1.0)
    ax.set_ylim(low - pad, high + pad)
    edge = blended_transform_factory(ax.transData, ax.transAxes)
    for n in cut:
        x = next(x for x, v in per_trial[n] if v > fence)  # where it first left the axis
        ax.plot(x, 0.97, "^", color="#d62728", ms=7, clip_on=False, transform=edge, zorder=5)
    shown = ", ".join(map(str, cut[:5])) + (", ..." if len(cut) > 5 else "")
    return f"trial {shown}: values above {high:.3g} (up to {top:.3g}) cut off, a triangle where each leaves the axis"
