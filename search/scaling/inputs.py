"""Batch-size scaling: the error every scaling input check raises, and the checks themselves."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from search.spec.batch_sizes import ScalingError, validate_batch_sizes  # re-exported: every scaling check's error

__all__ = ["ScalingError", "validate_batch_sizes", "positive_pairs", "fit_points"]


def positive_pairs(
    batch_sizes: Sequence[float] | np.ndarray, values: Sequence[float] | np.ndarray, name: str, hint: str = ""
) -> tuple[np.ndarray, np.ndarray]:
    """One finite value > 0 per batch size (itself finite and > 0), as float arrays."""
    b = np.asarray(batch_sizes, dtype=float)
    v = np.asarray(values, dtype=float)
    if b.ndim != 1 or v.shape != b.shape:
        raise ScalingError(name, f"need one value per batch size, got {len(v)} for {len(b)} batch sizes")
    for label, column in (("batch_sizes", b), (name, v)):
        bad = np.flatnonzero(~(np.isfinite(column) & (column > 0)))
        if len(bad):
            i = int(bad[0])
            raise ScalingError(f"{label}[{i}]", f"must be a finite number > 0, got {column[i]!r}{hint}")
    return b, v


def fit_points(
    batch_sizes: Sequence[float] | np.ndarray, steps: Sequence[float] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The McCandlish fit's input: positive (B, steps) pairs over at least 3 distinct batch sizes."""
    b, s = positive_pairs(batch_sizes, steps, "steps", " (leave out batch sizes that did not reach the target)")
    distinct = np.unique(b)
    if len(distinct) < 3:
        raise ScalingError(
            "batch_sizes",
            f"a fit of S(B) = S_min (1 + B_noise/B) needs at least 3 distinct batch sizes "
            f"that reached the target, got {len(distinct)} ({', '.join(f'{x:g}' for x in distinct)})",
        )
    return b, s
