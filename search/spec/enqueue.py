"""Known-good configurations to run first (``[[enqueue]]`` in a spec, ``hypersweep run --enqueue FILE``).

Each entry maps searched parameters (Optuna's flat names) to values; the campaign hands them to
``study.enqueue_trial`` when it creates the study, so that the first asks run them. An entry may leave
parameters out (the sampler picks those). Every value is checked against the space here, as one
:class:`~search.spec.table.SpecError` line naming the entry, the parameter, the value and the rule.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from search.compat import optuna_private as op
from search.spec.reading import read_spec_text
from search.spec.table import SpecError, _closest
from spaces.params import ConditionalParam, SearchSpace

__all__ = ["parse_enqueue", "load_enqueue_file", "misfit"]


def misfit(dist: BaseDistribution, value: Any) -> str:
    """Why ``value`` cannot be a value of ``dist`` (empty when it can)."""
    if isinstance(dist, CategoricalDistribution):
        if any(isinstance(value, bool) == isinstance(c, bool) and value == c for c in dist.choices):
            return ""
        return f"{value!r} is not one of {list(dist.choices)!r}"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return f"{value!r} is not a finite number"
    if isinstance(dist, IntDistribution) and value != int(value):
        return f"{value!r} is not an integer"
    if isinstance(dist, (FloatDistribution, IntDistribution)):
        if not dist.low <= value <= dist.high:
            return f"{value!r} is outside [{dist.low!r}, {dist.high!r}]"
        if not op.contains(dist, float(value)):  # both distributions' internal form is the float
            return f"{value!r} is not on the grid {dist.low!r} + k * {dist.step!r}"
        return ""
    return f"cannot check a value of a {type(dist).__name__}"


def parse_enqueue(source: str, key: str, entries: Any, space: SearchSpace, n_trials: int) -> tuple[dict[str, Any], ...]:
    """``entries`` (a table or a list of tables) checked against ``space``; errors name ``source: key[i].param``."""
    items = [entries] if isinstance(entries, Mapping) else entries
    if not isinstance(items, list) or not all(isinstance(e, Mapping) for e in items):
        got = type(entries).__name__
        raise SpecError(source, key, f"must be a table of parameter values or a list of them, got {got}")
    if len(items) > n_trials:
        raise SpecError(source, key, f"{len(items)} configurations do not fit in the budget of {n_trials} trials")
    return tuple(_entry(source, f"{key}[{i}]", dict(item), space) for i, item in enumerate(items))


def _entry(source: str, key: str, entry: dict[str, Any], space: SearchSpace) -> dict[str, Any]:
    searched, fixed = space.distributions(), space.fixed()
    if not entry:
        raise SpecError(source, key, "is empty: give at least one parameter value")
    kept: dict[str, Any] = {}
    for name, value in entry.items():
        if name in fixed:
            if fixed[name] != value:
                raise SpecError(source, f"{key}.{name}", f"{value!r}: the parameter is fixed at {fixed[name]!r}")
            continue
        if name not in searched:
            raise SpecError(source, f"{key}.{name}", f"not a searched parameter{_closest(name, sorted(searched))}")
        problem = misfit(searched[name], value)
        if problem:
            raise SpecError(source, f"{key}.{name}", problem)
        kept[name] = value
    _check_conditions(source, key, {**fixed, **kept}, space)
    return kept


def _check_conditions(source: str, key: str, values: dict[str, Any], space: SearchSpace) -> None:
    """A conditional parameter given where the entry's own values make its condition false."""
    for param in space:
        if isinstance(param, ConditionalParam) and param.name in values:
            if all(name in values for name in param.depends_on) and not param.holds(values):
                raise SpecError(
                    source,
                    f"{key}.{param.name}",
                    f"given, but its condition ({param.condition()}) does not hold for this configuration",
                )


def load_enqueue_file(path: str | Path, space: SearchSpace, n_trials: int) -> tuple[dict[str, Any], ...]:
    """The configurations in a JSON file (an object, or a list of objects), checked against ``space``."""
    source = str(path)
    try:
        data = json.loads(read_spec_text(path, what="JSON"))  # a regular file, bounded, UTF-8
    except json.JSONDecodeError as exc:
        raise SpecError(source, "json", f"not valid JSON ({exc})") from None
    return parse_enqueue(source, "enqueue", data, space, n_trials)
