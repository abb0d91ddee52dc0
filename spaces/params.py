"""Parameter specs, the search space that holds them, and its TOML parser."""

from __future__ import annotations

import abc
import math
import numbers
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Union

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from spaces.batch import power_of_two_sizes
from spaces.errors import (
    SpaceError,
    check_int,
    check_name,
    check_number,
    did_you_mean,
    shown,
)

Scalar = Union[str, int, float, bool, None]
_SCALARS = (str, int, float, bool, type(None))


def _builtin_scalar(key: str, value: object) -> Scalar:
    """``value`` as a builtin scalar (numpy scalars unwrapped), else an error."""
    if type(value) not in _SCALARS and hasattr(value, "item"):
        value = value.item()  # numpy scalars, including np.str_ and np.float64
    if not isinstance(value, _SCALARS):
        raise SpaceError(key, f"must be a str, int, float, bool or None, got {shown(value)}")
    if isinstance(value, float) and math.isnan(value):
        raise SpaceError(key, "must not be NaN")
    return value  # type: ignore[return-value]


class Param(abc.ABC):
    """One named entry of a search space.

    ``distribution()`` is the Optuna distribution to sample from, or None for
    a constant; ``to_builtin(value)`` turns a sampled value into plain Python.
    """

    name: str

    @abc.abstractmethod
    def distribution(self) -> BaseDistribution | None:
        """The Optuna distribution, or None if the parameter is not searched."""

    @abc.abstractmethod
    def to_builtin(self, value: Any) -> Any:
        """A sampled value as a plain builtin (no numpy types)."""

    def distributions(self) -> dict[str, BaseDistribution]:
        """The flat Optuna parameters this entry is searched through (one, or none if fixed).

        Composite parameters (architecture genomes) return several and override
        :meth:`value_from`.
        """
        dist = self.distribution()
        return {} if dist is None else {self.name: dist}

    def value_from(self, sampled: Mapping[str, Any]) -> Any:
        """This parameter's value from the flat sampled values."""
        if self.name not in sampled:
            raise SpaceError(self.name, "missing from the sampled values")
        return self.to_builtin(sampled[self.name])


@dataclass(frozen=True)
class FloatParam(Param):
    """A float in ``[low, high]``, optionally log-scaled or on a ``step`` grid."""

    name: str
    low: float
    high: float
    log: bool = False
    step: float | None = None

    def __post_init__(self) -> None:
        check_name("name", self.name)
        n = self.name
        low = check_number(f"{n}.low", self.low)
        high = check_number(f"{n}.high", self.high)
        if low > high:
            raise SpaceError(f"{n}.low", f"must be <= high ({high}), got {low}")
        if not isinstance(self.log, bool):
            raise SpaceError(f"{n}.log", f"must be true or false, got {shown(self.log)}")
        if self.log and low <= 0:
            raise SpaceError(f"{n}.low", f"must be > 0 when log = true, got {low}")
        if self.step is not None:
            step = check_number(f"{n}.step", self.step)
            if step <= 0:
                raise SpaceError(f"{n}.step", f"must be > 0, got {self.step!r}")
            if self.log:
                raise SpaceError(f"{n}.step", "cannot be combined with log = true")
            object.__setattr__(self, "step", step)
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    def distribution(self) -> FloatDistribution:
        return FloatDistribution(self.low, self.high, log=self.log, step=self.step)

    def to_builtin(self, value: Any) -> float:
        return check_number(self.name, value)


@dataclass(frozen=True)
class IntParam(Param):
    """An integer in ``[low, high]`` on a ``step`` grid, or log-scaled (step 1)."""

    name: str
    low: int
    high: int
    log: bool = False
    step: int = 1

    def __post_init__(self) -> None:
        check_name("name", self.name)
        n = self.name
        low = check_int(f"{n}.low", self.low)
        high = check_int(f"{n}.high", self.high)
        step = check_int(f"{n}.step", self.step)
        if low > high:
            raise SpaceError(f"{n}.low", f"must be <= high ({high}), got {low}")
        if not isinstance(self.log, bool):
            raise SpaceError(f"{n}.log", f"must be true or false, got {shown(self.log)}")
        if self.log and low < 1:
            raise SpaceError(f"{n}.low", f"must be >= 1 when log = true, got {low}")
        if step <= 0:
            raise SpaceError(f"{n}.step", f"must be > 0, got {step}")
        if self.log and step != 1:
            raise SpaceError(f"{n}.step", f"must be 1 when log = true, got {step}")
        if (high - low) % step:
            raise SpaceError(
                f"{n}.high", f"high - low = {high - low} must be a multiple of step = {step}"
            )
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)
        object.__setattr__(self, "step", step)

    def distribution(self) -> IntDistribution:
        return IntDistribution(self.low, self.high, log=self.log, step=self.step)

    def to_builtin(self, value: Any) -> int:
        if isinstance(value, numbers.Real) and not isinstance(value, bool) and float(value).is_integer():
            return int(value)
        raise SpaceError(self.name, f"must be an integer, got {shown(value)}")


@dataclass(frozen=True)
class CategoricalParam(Param):
    """One of ``choices`` (builtin scalars: str, int, float, bool or None)."""

    name: str
    choices: tuple[Scalar, ...]

    def __post_init__(self) -> None:
        check_name("name", self.name)
        key = f"{self.name}.choices"
        if not isinstance(self.choices, (list, tuple)):
            raise SpaceError(key, f"must be a list, got {shown(self.choices)}")
        if not self.choices:
            raise SpaceError(key, "must not be empty")
        choices: list[Scalar] = []
        for i, choice in enumerate(self.choices):
            choice = _builtin_scalar(f"{key}[{i}]", choice)
            for j, earlier in enumerate(choices):
                if choice == earlier:
                    raise SpaceError(
                        f"{key}[{i}]", f"duplicate: {choice!r} equals choices[{j}] = {earlier!r}"
                    )
            choices.append(choice)
        object.__setattr__(self, "choices", tuple(choices))

    def distribution(self) -> CategoricalDistribution:
        return CategoricalDistribution(self.choices)

    def to_builtin(self, value: Any) -> Scalar:
        value = _builtin_scalar(self.name, value)
        for choice in self.choices:
            if choice == value and type(choice) is type(value):
                return choice
        raise SpaceError(self.name, f"{value!r} is not one of {list(self.choices)}")


@dataclass(frozen=True)
class BatchSizeParam(Param):
    """A batch size: one of the powers of two from ``low`` to ``high``."""

    name: str
    low: int
    high: int

    def __post_init__(self) -> None:
        check_name("name", self.name)
        power_of_two_sizes(self.low, self.high, key=self.name)
        object.__setattr__(self, "low", int(self.low))
        object.__setattr__(self, "high", int(self.high))

    @property
    def sizes(self) -> tuple[int, ...]:
        """The batch sizes searched, ascending."""
        return power_of_two_sizes(self.low, self.high, key=self.name)

    def distribution(self) -> CategoricalDistribution:
        return CategoricalDistribution(self.sizes)

    def to_builtin(self, value: Any) -> int:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) in self.sizes:
            return int(value)
        raise SpaceError(self.name, f"{value!r} is not one of the batch sizes {list(self.sizes)}")


@dataclass(frozen=True)
class FixedParam(Param):
    """A constant carried into every trial config; not searched."""

    name: str
    value: Scalar

    def __post_init__(self) -> None:
        check_name("name", self.name)
        object.__setattr__(self, "value", _builtin_scalar(self.name, self.value))

    def distribution(self) -> None:
        return None

    def to_builtin(self, value: Any) -> Scalar:
        return _builtin_scalar(self.name, value)


@dataclass(frozen=True)
class SearchSpace:
    """An ordered set of uniquely named parameters."""

    params: tuple[Param, ...]

    def __post_init__(self) -> None:
        params = tuple(self.params)
        seen: set[str] = set()
        for i, param in enumerate(params):
            if not isinstance(param, Param):
                raise SpaceError(f"params[{i}]", f"must be a Param, got {shown(param)}")
            if param.name in seen:
                raise SpaceError(param.name, "duplicate parameter name")
            seen.add(param.name)
        object.__setattr__(self, "params", params)

    @property
    def names(self) -> tuple[str, ...]:
        """Every parameter name, in spec order."""
        return tuple(p.name for p in self.params)

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __getitem__(self, name: str) -> Param:
        for param in self.params:
            if param.name == name:
                return param
        raise KeyError(name)

    def __iter__(self) -> Iterator[Param]:
        return iter(self.params)

    def __len__(self) -> int:
        return len(self.params)

    def distributions(self) -> dict[str, BaseDistribution]:
        """The searched parameters' Optuna distributions, by name."""
        dists: dict[str, BaseDistribution] = {}
        for param in self.params:
            dists.update(param.distributions())
        return dists

    def fixed(self) -> dict[str, Any]:
        """The constant parameters' values, by name."""
        return {p.name: p.value for p in self.params if isinstance(p, FixedParam)}

    def complete(self, sampled: Mapping[str, Any]) -> dict[str, Any]:
        """Sampled values as builtins plus the fixed values, in spec order.

        Every searched parameter must be in ``sampled``; a name that is not a
        searched parameter of this space is an error.
        """
        searched = self.distributions()
        for name in sampled:
            if name not in searched:
                rule = "is fixed, not searched" if name in self else "is not a parameter of this space"
                raise SpaceError(str(name), f"{rule}; searched: {', '.join(searched) or '(none)'}")
        out: dict[str, Any] = {}
        for param in self.params:
            out[param.name] = param.value if isinstance(param, FixedParam) else param.value_from(sampled)
        return out


# ---- parsing a TOML [space] table -------------------------------------------

ParamBuilder = Callable[[str, Mapping[str, Any]], Param]


def _table_builder(
    cls: Callable[..., Param], required: tuple[str, ...], optional: tuple[str, ...]
) -> ParamBuilder:
    """A builder that checks a table's keys, then calls ``cls(name, **table)``."""

    def build(name: str, table: Mapping[str, Any]) -> Param:
        valid = ("type", *required, *optional)
        for key in table:
            if key not in valid:
                raise SpaceError(f"{name}.{key}", f"unknown key; {did_you_mean(str(key), valid)}")
        for key in required:
            if key not in table:
                raise SpaceError(
                    f"{name}.{key}", f"missing; type {table['type']!r} needs {', '.join(required)}"
                )
        return cls(name, **{k: v for k, v in table.items() if k != "type"})

    return build


PARAM_TYPES: dict[str, ParamBuilder] = {
    "float": _table_builder(FloatParam, ("low", "high"), ("log", "step")),
    "int": _table_builder(IntParam, ("low", "high"), ("log", "step")),
    "categorical": _table_builder(CategoricalParam, ("choices",), ()),
    "batch_size": _table_builder(BatchSizeParam, ("low", "high"), ()),
    "fixed": _table_builder(FixedParam, ("value",), ()),
}
"""``type`` name -> builder ``(name, table) -> Param``; the table still holds ``type``.

Other packages add kinds (architecture genomes) with :func:`register_param_type`.
"""


def register_param_type(type_name: str, builder: ParamBuilder) -> None:
    """Let ``{type = type_name, ...}`` tables build params with ``builder``."""
    check_name("type", type_name)
    if type_name in PARAM_TYPES and PARAM_TYPES[type_name] is not builder:
        raise SpaceError(type_name, "param type already registered")
    PARAM_TYPES[type_name] = builder


def _parse_param(name: str, value: Any) -> Param:
    if isinstance(value, Mapping):
        if "type" not in value:
            raise SpaceError(f"{name}.type", f"missing; valid: {', '.join(sorted(PARAM_TYPES))}")
        kind = value["type"]
        if not isinstance(kind, str):
            raise SpaceError(f"{name}.type", f"must be a string, got {shown(kind)}")
        if kind not in PARAM_TYPES:
            raise SpaceError(f"{name}.type", f"unknown type {kind!r}; {did_you_mean(kind, PARAM_TYPES)}")
        return PARAM_TYPES[kind](name, value)
    if isinstance(value, (list, tuple)):
        raise SpaceError(
            name, 'a list is not a parameter; use {type="categorical", choices=[...]}'
        )
    if isinstance(value, _SCALARS):
        return FixedParam(name, value)
    raise SpaceError(name, f"must be a table or a scalar, got {shown(value)}")


def parse_space(table: Mapping[str, Any]) -> SearchSpace:
    """Build a :class:`SearchSpace` from a TOML ``[space]`` table.

    A table value ``{type = ..., ...}`` is a searched parameter (``float``,
    ``int``, ``categorical``, ``batch_size``, ``fixed`` or a registered type);
    a plain scalar is a :class:`FixedParam`.
    """
    if not isinstance(table, Mapping):
        raise SpaceError("space", f"must be a table, got {shown(table)}")
    return SearchSpace(tuple(_parse_param(check_name("space", name), value) for name, value in table.items()))
