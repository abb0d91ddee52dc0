"""A parameter searched only where its condition holds (``when = { model = "mlp" }``), or over a range another
parameter bounds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, cast

from optuna.distributions import (
    BaseDistribution,
)

from spaces.conditions import Comparison, describe, matches, parse_comparison
from spaces.errors import (
    SpaceError,
    check_name,
    shown,
)
from spaces.scalar_params import (
    FixedParam,
    Param,
    Scalar,
    builtin_scalar,
)

__all__ = ["ConditionalParam", "same_value", "value_of"]


def same_value(a: Any, b: Any) -> bool:
    """Equal values, a bool never equal to a number (``True == 1`` in Python)."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


@dataclass(frozen=True)
class ConditionalParam(Param):
    """A parameter searched only in the trials where its condition holds (``when = { model = "mlp" }``).

    ``when``: ``((other parameter, (allowed values, ...)), ...)``; the condition holds when every
    named parameter has a value in the trial (sampled, fixed, or a declared default) and it is
    one of the allowed values. Elsewhere the parameter is absent from the trial's Optuna
    parameters and from the trainer's config, or the trainer gets ``default`` if one is declared
    (``has_default``). Other attributes (``choices``, ``low``, ...) are the wrapped ``param``'s.

    ``bounds``: ``(("low" | "high", other parameter), ...)``: a range that depends on another parameter
    (``high = "n_layers"``), taken from that parameter's value in each trial; the wrapped ``param`` holds the
    widest range. Such a parameter is sampled after the one it names (define-by-run), ``when`` may be empty.
    """

    name: str
    param: Param
    when: tuple[tuple[str, tuple[Scalar, ...]], ...]
    has_default: bool = False
    default: Scalar = None
    bounds: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        check_name("name", self.name)
        if not isinstance(self.param, Param) or isinstance(self.param, ConditionalParam):
            raise SpaceError(self.name, f"must wrap an unconditional Param, got {shown(self.param)}")
        if self.param.name != self.name:
            raise SpaceError(self.name, f"wraps the parameter {self.param.name!r}, not {self.name!r}")
        object.__setattr__(self, "bounds", tuple((str(side), str(other)) for side, other in self.bounds))
        object.__setattr__(self, "when", _parse_when(self.name, self.when) if self.when or not self.bounds else ())
        if self.has_default:
            object.__setattr__(self, "default", builtin_scalar(f"{self.name}.default", self.default))

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") or attr == "param":  # not during unpickling, before ``param`` is set
            raise AttributeError(attr)
        return getattr(self.param, attr)

    def distribution(self) -> BaseDistribution | None:
        return self.param.distribution()

    def distributions(self) -> dict[str, BaseDistribution]:
        return self.param.distributions()

    def to_builtin(self, value: Any) -> Any:
        return self.param.to_builtin(value)

    def value_from(self, sampled: Mapping[str, Any]) -> Any:
        return value_of(self.param, sampled)

    def distributions_for(self, values: Mapping[str, Any]) -> dict[str, BaseDistribution]:
        """Its distribution in a trial whose values so far are ``values`` (a dependent range resolved)."""
        if not self.bounds:
            return self.distributions()
        return replace(cast(Any, self.param), **{side: values[other] for side, other in self.bounds}).distributions()

    @property
    def depends_on(self) -> tuple[str, ...]:
        """The parameters its condition and its range name."""
        return tuple(dict.fromkeys([*(name for name, _ in self.when), *(other for _, other in self.bounds)]))

    def holds(self, values: Mapping[str, Any]) -> bool:
        """Whether the condition holds for a trial whose (completed) values so far are ``values``."""
        return all(name in values and matches(values[name], allowed, same_value) for name, allowed in self.when)

    def condition(self) -> str:
        """The condition as the spec writes it: ``model = 'mlp', depth in [2, 3], n_layers >= 3``."""
        return ", ".join(describe(n, a) for n, a in self.when)


def _parse_when(name: str, when: Any) -> tuple[tuple[str, tuple[Scalar, ...]], ...]:
    """``when`` as ``((parameter, allowed values), ...)`` from a table ``{ model = "mlp", depth = [2, 3] }``."""
    key = f"{name}.when"
    items = when.items() if isinstance(when, Mapping) else when
    if isinstance(when, (str, bytes)) or not isinstance(items, Iterable):
        raise SpaceError(key, f'must be a table such as {{ model = "mlp" }}, got {shown(when)}')
    out: list[tuple[str, tuple[Scalar, ...]]] = []
    for item in items:
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise SpaceError(key, f'must be a table such as {{ model = "mlp" }}, got {shown(when)}')
        other, allowed = item
        check_name(key, other)
        if isinstance(allowed, Comparison):
            values: tuple[Any, ...] = (allowed,)
        elif isinstance(allowed, Mapping):
            values = (parse_comparison(f"{key}.{other}", allowed),)
        elif isinstance(allowed, (list, tuple)):
            if not allowed:
                raise SpaceError(f"{key}.{other}", "must be a value or a non-empty list of values")
            values = tuple(
                v if isinstance(v, Comparison) else builtin_scalar(f"{key}.{other}[{i}]", v)
                for i, v in enumerate(allowed)
            )
        else:
            values = (builtin_scalar(f"{key}.{other}", allowed),)
        out.append((other, values))
    if not out:
        raise SpaceError(key, 'must name at least one parameter, e.g. { model = "mlp" }')
    return tuple(out)


def value_of(param: Param, sampled: Mapping[str, Any]) -> Any:
    """A parameter's value in a trial: a constant, or from the flat sampled values."""
    return param.value if isinstance(param, FixedParam) else param.value_from(sampled)
