"""The global batch sizes of a scaling sweep, checked (``[scaling] batch_sizes``), and :class:`ScalingError`,
the error every scaling input check raises (:mod:`search.scaling.inputs` has the others)."""

from __future__ import annotations

import numbers
from collections.abc import Iterable

from spaces.errors import InputError

__all__ = ["ScalingError", "validate_batch_sizes"]


class ScalingError(InputError):
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
