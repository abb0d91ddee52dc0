"""The kinds of parameter: :class:`Param`, and the float, int, categorical, batch-size and fixed ones."""

from __future__ import annotations

import abc
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, SupportsInt, cast

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
    shown,
)

__all__ = [
    "BatchSizeParam",
    "CategoricalParam",
    "FixedParam",
    "FloatParam",
    "IntParam",
    "Param",
    "SCALARS",
    "Scalar",
    "builtin_scalar",
]

Scalar = str | int | float | bool | None
SCALARS = (str, int, float, bool, type(None))


def builtin_scalar(key: str, value: object) -> Scalar:
    """``value`` as a builtin scalar (numpy scalars unwrapped), else an error."""
    if type(value) not in SCALARS and hasattr(value, "item"):
        value = value.item()  # numpy scalars, including np.str_ and np.float64
    if not isinstance(value, SCALARS):
        raise SpaceError(key, f"must be a str, int, float, bool or None, got {shown(value)}")
    if isinstance(value, float) and math.isnan(value):
        raise SpaceError(key, "must not be NaN")
    return value


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
            raise SpaceError(f"{n}.high", f"high - low = {high - low} must be a multiple of step = {step}")
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)
        object.__setattr__(self, "step", step)

    def distribution(self) -> IntDistribution:
        return IntDistribution(self.low, self.high, log=self.log, step=self.step)

    def to_builtin(self, value: Any) -> int:
        if isinstance(value, numbers.Real) and not isinstance(value, bool) and float(value).is_integer():
            return int(cast(SupportsInt, value))  # numbers.Real declares no __int__; ints, floats and numpy's do
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
        seen: dict[Scalar, int] = {}  # equal values hash alike (1 == 1.0 == True): one look-up per choice
        for i, choice in enumerate(self.choices):
            choice = builtin_scalar(f"{key}[{i}]", choice)
            j = seen.setdefault(choice, i)
            if j != i:
                raise SpaceError(f"{key}[{i}]", f"duplicate: {choice!r} equals choices[{j}] = {choices[j]!r}")
            choices.append(choice)
        object.__setattr__(self, "choices", tuple(choices))

    def distribution(self) -> CategoricalDistribution:
        return CategoricalDistribution(self.choices)

    def to_builtin(self, value: Any) -> Scalar:
        value = builtin_scalar(self.name, value)
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
        object.__setattr__(self, "value", builtin_scalar(self.name, self.value))

    def distribution(self) -> None:
        return None

    def to_builtin(self, value: Any) -> Scalar:
        return builtin_scalar(self.name, value)
