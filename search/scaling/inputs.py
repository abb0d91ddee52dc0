"""Batch-size scaling: the error every scaling input check raises, and the checks themselves."""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["ScalingError", "validate_batch_sizes", "positive_pairs", "fit_points"]


class ScalingError(ValueError):
    """A scaling-sweep input broke a rule, or the data cannot support a fit.

    ``key`` names the offending input (``"batch_sizes[2]"``); ``problem`` says
    what was wrong and what would be right.
    """

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem

    def __reduce__(self) -> tuple[type[ScalingError], tuple[str, str]]:
        return (type(self), (self.key, self.problem))


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


def validate_batch_sizes(values: object, *, key: str = "batch_sizes") -> tuple[int, ...]:
    """The batch sizes of a sweep as builtin ints, sorted ascending.

    Each must be an integer (not a bool, not a float such as ``8.0``) ``>= 1``,
    each may appear once, and a fit needs at least 3. Otherwise raises
    :class:`ScalingError` naming the value and the rule.
    """
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ScalingError(key, f"must be a list of positive integers, got {values!r}")
    seen: dict[int, int] = {}
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise ScalingError(f"{key}[{i}]", f"must be a positive integer, got {v!r} ({type(v).__name__})")
        if v < 1:
            raise ScalingError(f"{key}[{i}]", f"must be a positive integer (>= 1), got {v!r}")
        if int(v) in seen:
            raise ScalingError(
                f"{key}[{i}]", f"{int(v)} already appears at {key}[{seen[int(v)]}]; list each batch size once"
            )
        seen[int(v)] = i
    if len(seen) < 3:
        raise ScalingError(
            key, f"a scaling fit needs at least 3 batch sizes, got {len(seen)} ({list(seen)}); e.g. [8, 16, 32, 64]"
        )
    return tuple(sorted(seen))
