"""The timeline's labels: each run's trial number (and its segment's width, its GPUs) on its bar, where it fits."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from search.reports.timing import Span, resized_trials

__all__ = ["run_labels", "label_px", "LABEL_HIGH_PX"]


def run_labels(
    ax: Any,
    spans: Sequence[Span],
    row: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    px_per_s: float,
    tall: np.ndarray,
    dpi: float,
) -> None:
    """Each run's trial number (its segment's width, ``×k``, where the trial changed width or ran on k > 1 slots;
    its GPUs) in white on its bar, where it fits and no label drawn before on that row overlaps it (several slots of
    one worker share a row): at most a few dozen per row, however many trials.
    ``row``, ``start``, ``end``: each span's row and its ends on the drawn axis; ``tall``: the spans whose bar is
    tall enough for a label; ``dpi``: the figure's."""
    width_px = (end - start) * px_per_s
    resized = resized_trials(spans)
    fits = np.intersect1d(np.flatnonzero(width_px >= label_px("0", dpi)), tall)  # the narrowest: the others cannot fit
    taken: dict[float, float] = {}  # row -> right edge (s) of its last label
    for i in sorted(map(int, fits), key=lambda i: (row[i], start[i])):
        s = spans[i]
        width = f" \u00d7{s.width}" if s.number in resized or (s.width or 1) > 1 else ""
        for label in (f"{s.number}{width}" + (f" GPU {s.devices}" if s.devices else ""), f"{s.number}{width}"):
            drawn_px = label_px(label, dpi)
            if drawn_px <= width_px[i]:
                middle = (start[i] + end[i]) / 2
                if middle - drawn_px / 2 / px_per_s < taken.get(row[i], -math.inf):
                    break
                ax.text(middle, row[i], label, ha="center", va="center", fontsize=8, color="white", zorder=3)
                taken[row[i]] = middle + drawn_px / 2 / px_per_s
                break


LABEL_HIGH_PX = 9  # a bar this many pixels tall holds an 8-point label's letters


def label_px(label: str, dpi: float) -> float:
    """About how wide ``label`` is drawn at 8 points, with a margin (pixels)."""
    return len(label) * 8 * 0.62 * dpi / 72 + 4
