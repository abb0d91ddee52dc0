"""Parameter specs, the search space that holds them, and its TOML parser."""

from __future__ import annotations

import abc
import math
import numbers
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, SupportsInt, cast

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from spaces.batch import power_of_two_sizes
from spaces.conditions import Comparison, describe, matches, parse_comparison
from spaces.errors import (
    SpaceError,
    check_int,
    check_name,
    check_number,
    did_you_mean,
    shown,
)

Scalar = str | int | float | bool | None
_SCALARS = (str, int, float, bool, type(None))


def _builtin_scalar(key: str, value: object) -> Scalar:
    """``value`` as a builtin scalar (numpy scalars unwrapped), else an error."""
    if type(value) not in _SCALARS and hasattr(value, "item"):
        value = value.item()  # numpy scalars, including np.str_ and np.float64
    if not isinstance(value, _SCALARS):
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
            choice = _builtin_scalar(f"{key}[{i}]", choice)
            j = seen.setdefault(choice, i)
            if j != i:
                raise SpaceError(f"{key}[{i}]", f"duplicate: {choice!r} equals choices[{j}] = {choices[j]!r}")
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


def _same(a: Any, b: Any) -> bool:
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
            object.__setattr__(self, "default", _builtin_scalar(f"{self.name}.default", self.default))

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
        return _value_of(self.param, sampled)

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
        return all(name in values and matches(values[name], allowed, _same) for name, allowed in self.when)

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
                v if isinstance(v, Comparison) else _builtin_scalar(f"{key}.{other}[{i}]", v)
                for i, v in enumerate(allowed)
            )
        else:
            values = (_builtin_scalar(f"{key}.{other}", allowed),)
        out.append((other, values))
    if not out:
        raise SpaceError(key, 'must name at least one parameter, e.g. { model = "mlp" }')
    return tuple(out)


def _value_of(param: Param, sampled: Mapping[str, Any]) -> Any:
    """A parameter's value in a trial: a constant, or from the flat sampled values."""
    return param.value if isinstance(param, FixedParam) else param.value_from(sampled)


def _allowed_values(param: Param, key: str, values: tuple[Scalar, ...]) -> tuple[Scalar, ...]:
    """A condition's values, checked against what the parameter it names can take, as that parameter's builtins."""
    inner = param.param if isinstance(param, ConditionalParam) else param
    if isinstance(inner, FixedParam):
        if not matches(inner.value, values, _same):
            raise SpaceError(key, f"never holds: {param.name!r} is fixed at {inner.value!r}")
        return values
    if isinstance(inner, CategoricalParam):
        possible: tuple[Any, ...] = inner.choices
    elif isinstance(inner, BatchSizeParam):
        possible = inner.sizes
    elif isinstance(inner, IntParam):
        possible = tuple(range(inner.low, inner.high + 1, inner.step))
    else:
        kind = type(inner).__name__.removesuffix("Param").lower()
        raise SpaceError(
            key, f"a condition may name a categorical, int, batch_size or fixed parameter; {param.name!r} is {kind}"
        )
    for value in values:
        if isinstance(value, Comparison):
            if not any(value.holds_for(p) for p in possible):
                raise SpaceError(key, f"never holds: no value {param.name!r} can take is {value}")
            continue
        if not any(_same(value, p) for p in possible):
            shown_possible = list(possible) if len(possible) <= 12 else f"{possible[0]!r} ... {possible[-1]!r}"
            raise SpaceError(key, f"{value!r} is not a value {param.name!r} can take: {shown_possible}")
    return values


def _suggest(trial: Any, name: str, dist: BaseDistribution) -> Any:
    """``trial.suggest_*`` for ``dist`` (an Optuna trial, duck-typed: ``spaces`` does not import ``optuna.trial``)."""
    if isinstance(dist, FloatDistribution):
        return trial.suggest_float(name, dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(name, dist.choices)
    raise SpaceError(name, f"cannot suggest a {type(dist).__name__}")


@dataclass(frozen=True)
class SearchSpace:
    """An ordered set of uniquely named parameters; some may be conditional (:class:`ConditionalParam`).

    Conditions are checked here: each names a parameter of the space, with values it can take, and
    they form no cycle. ``order`` lists the names so that a parameter comes after every parameter its
    condition names (conditions may chain: ``b`` when ``a``, ``c`` when ``b``).
    """

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
        object.__setattr__(self, "order", _dependency_order(params))
        object.__setattr__(self, "_by_name", {p.name: p for p in params})

    order: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)
    _by_name: dict[str, Param] = field(default_factory=dict, init=False, repr=False, compare=False)
    _kept: dict[str, dict[str, BaseDistribution]] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def names(self) -> tuple[str, ...]:
        """Every parameter name, in spec order."""
        return tuple(p.name for p in self.params)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __getitem__(self, name: str) -> Param:
        return self._by_name[name]

    def __iter__(self) -> Iterator[Param]:
        return iter(self.params)

    def __len__(self) -> int:
        return len(self.params)

    def distributions(self) -> dict[str, BaseDistribution]:
        """The searched parameters' Optuna distributions, by name (conditional ones included)."""
        return dict(self._distributions("all"))

    def _distributions(self, which: str) -> dict[str, BaseDistribution]:
        """``all`` or ``base`` (without the conditional parameters), built once: the parameters are immutable,
        and every ask of a campaign reads them. Callers get a copy."""
        kept = self._kept.get(which)
        if kept is None:
            kept = {}
            for param in self.params:
                if which == "all" or not isinstance(param, ConditionalParam):
                    kept.update(param.distributions())
            self._kept[which] = kept
        return kept

    @property
    def conditional(self) -> tuple[str, ...]:
        """The names of the conditional parameters, in spec order."""
        return tuple(p.name for p in self.params if isinstance(p, ConditionalParam))

    def base_distributions(self) -> dict[str, BaseDistribution]:
        """The distributions every trial samples: the searched parameters without a condition.

        A trial is asked with these as fixed distributions; :meth:`suggest` then adds the
        conditional parameters whose condition holds (define-by-run).
        """
        return dict(self._distributions("base"))

    def fixed(self) -> dict[str, Any]:
        """The constant parameters' values, by name."""
        return {p.name: p.value for p in self.params if isinstance(p, FixedParam)}

    def suggest(self, trial: Any) -> None:
        """Suggest on ``trial`` (an Optuna trial asked with :meth:`base_distributions`) each conditional
        parameter whose condition holds, in dependency order, with ``trial.suggest_*``."""
        if not self.conditional:
            return
        named = {other for p in self.params if isinstance(p, ConditionalParam) for other in p.depends_on}
        values: dict[str, Any] = {}  # of the parameters a condition names (never a genome, not decoded here)
        for name in self.order:
            param = self[name]
            if isinstance(param, ConditionalParam):
                if not param.holds(values):
                    if param.has_default:
                        values[name] = param.default
                    continue
                for flat, dist in param.distributions_for(values).items():
                    _suggest(trial, flat, dist)
            if name in named:
                values[name] = _value_of(param, trial.params)

    def suggest_missing(self, trial: Any) -> list[str]:
        """Suggest on ``trial`` every parameter it should have and lacks (its record was cut short by a
        crash between its parameters); the names it lacked, in order."""
        before = set(trial.params)
        for name, dist in self.base_distributions().items():
            if name not in before:
                _suggest(trial, name, dist)
        self.suggest(trial)  # the conditional ones; those it has keep their values
        return [name for name in trial.params if name not in before]

    def complete(self, sampled: Mapping[str, Any]) -> dict[str, Any]:
        """Sampled values as builtins plus the fixed values, in spec order.

        Every searched parameter must be in ``sampled``, except a conditional one whose
        condition does not hold: it must be absent, and the result has its ``default``
        if it declares one, else no entry for it. A name that is not a searched
        parameter of this space is an error.
        """
        searched = self._distributions("all")
        for name in sampled:
            if name not in searched:
                rule = "is fixed, not searched" if name in self else "is not a parameter of this space"
                raise SpaceError(str(name), f"{rule}; searched: {', '.join(searched) or '(none)'}")
        values: dict[str, Any] = {}
        for name in self.order:
            param = self[name]
            if isinstance(param, ConditionalParam) and not param.holds(values):
                if any(flat in sampled for flat in param.distributions()):
                    raise SpaceError(name, f"was sampled although its condition ({param.condition()}) does not hold")
                if param.has_default:
                    values[name] = param.default
                continue
            values[name] = _value_of(param, sampled)
        return {name: values[name] for name in self.names if name in values}


def _dependency_order(params: tuple[Param, ...]) -> tuple[str, ...]:
    """Every name, each after the parameters its condition names (spec order otherwise); checks the conditions."""
    by_name = {p.name: p for p in params}
    for param in params:
        if not isinstance(param, ConditionalParam):
            continue
        for other, allowed in param.when:
            key = f"{param.name}.when.{other}"
            if other == param.name:
                raise SpaceError(key, "a parameter's condition cannot name the parameter itself")
            if other not in by_name:
                raise SpaceError(key, f"unknown parameter; {did_you_mean(other, set(by_name) - {param.name})}")
            _allowed_values(by_name[other], key, allowed)
    order: list[str] = []
    state: dict[str, int] = {}  # 1: being visited, 2: placed

    def visit(name: str, path: tuple[str, ...]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycle = path[path.index(name) :] + (name,)
            raise SpaceError(f"{cycle[0]}.when", f"conditions form a cycle: {' -> '.join(cycle)}")
        state[name] = 1
        param = by_name[name]
        for other in param.depends_on if isinstance(param, ConditionalParam) else ():
            visit(other, (*path, name))
        state[name] = 2
        order.append(name)

    for param in params:
        visit(param.name, ())
    return tuple(order)


# ---- parsing a TOML [space] table -------------------------------------------

ParamBuilder = Callable[[str, Mapping[str, Any]], Param]
CONDITION_KEYS = ("when", "default", "repeat")  # in any parameter's table: searched only when ``when`` holds
REPEAT_INDEX = "{i}"  # in a repeated parameter's name: n_units_l{i} -> n_units_l0, n_units_l1, ...


def _table_builder(cls: Callable[..., Param], required: tuple[str, ...], optional: tuple[str, ...]) -> ParamBuilder:
    """A builder that checks a table's keys, then calls ``cls(name, **table)``."""

    def build(name: str, table: Mapping[str, Any]) -> Param:
        valid = ("type", *required, *optional)
        for key in table:
            if key not in valid:  # the hint names the condition keys too (parse_space takes them off first)
                raise SpaceError(f"{name}.{key}", f"unknown key; {did_you_mean(str(key), (*valid, *CONDITION_KEYS))}")
        for key in required:
            if key not in table:
                raise SpaceError(f"{name}.{key}", f"missing; type {table['type']!r} needs {', '.join(required)}")
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
        param = PARAM_TYPES[kind](name, {k: v for k, v in value.items() if k not in CONDITION_KEYS})
        if "when" in value:
            return ConditionalParam(name, param, value["when"], "default" in value, value.get("default"))
        if "default" in value:
            raise SpaceError(f"{name}.default", "only a conditional parameter (with when = { ... }) has a default")
        return param
    if isinstance(value, (list, tuple)):
        raise SpaceError(name, 'a list is not a parameter; use {type="categorical", choices=[...]}')
    if isinstance(value, _SCALARS):
        return FixedParam(name, value)
    raise SpaceError(name, f"must be a table or a scalar, got {shown(value)}")


def parse_space(table: Mapping[str, Any]) -> SearchSpace:
    """Build a :class:`SearchSpace` from a TOML ``[space]`` table.

    A table value ``{type = ..., ...}`` is a searched parameter (``float``,
    ``int``, ``categorical``, ``batch_size``, ``fixed`` or a registered type);
    a plain scalar is a :class:`FixedParam`. Any table may add ``when = { other = value }``
    (a list of values, or comparisons such as ``{ ">=" = 3 }``) and ``default = ...``: a
    :class:`ConditionalParam`. ``"n_units_l{i}" = { ..., repeat = "n_layers" }`` is one parameter per
    layer, as Optuna's define-by-run loop ``for i in range(n_layers)`` suggests them (:func:`_repeated`).
    """
    if not isinstance(table, Mapping):
        raise SpaceError("space", f"must be a table, got {shown(table)}")
    plain = {check_name("space", name): value for name, value in table.items()}
    singles = {
        name: _parse_param(name, value)
        for name, value in plain.items()
        if not _is_repeated(name, value) and not _refs(value)
    }
    params: list[Param] = []
    for name, value in plain.items():
        if name in singles:
            params.append(singles[name])
        elif REPEAT_INDEX in name:
            params.extend(_repeated(name, value, singles))
        else:
            params.append(_dependent(name, value, singles))
    return SearchSpace(tuple(params))


def _refs(value: Any) -> dict[str, str]:
    """A range's ends that name another parameter: ``{"high": "n_layers"}`` for ``high = "n_layers"``."""
    if not isinstance(value, Mapping) or value.get("type") not in ("int", "float"):
        return {}
    return {side: value[side] for side in ("low", "high") if isinstance(value.get(side), str)}


def _dependent(name: str, value: Mapping[str, Any], singles: Mapping[str, Param]) -> Param:
    """A range whose ``low`` or ``high`` is another parameter's value: searched after it, over the widest range
    its values allow; every value that parameter can take must leave a valid range."""
    refs = _refs(value)
    ends: dict[str, tuple[int, ...]] = {}
    for side, other in refs.items():
        if other not in singles or isinstance(singles[other], ConditionalParam):
            raise SpaceError(
                f"{name}.{side}",
                f"must be a number, got {shown(other)}, or name an unconditional int, "
                f"categorical or fixed parameter ({did_you_mean(other, singles)})",
            )
        ends[side] = _counts(singles[other], f"{name}.{side}")
    widest = {**value, **{side: (min if side == "low" else max)(ends[side]) for side in refs}}
    base = _parse_param(name, widest)
    param = base.param if isinstance(base, ConditionalParam) else base
    for low in ends.get("low", (param.low,)):  # type: ignore[attr-defined]
        for high in ends.get("high", (param.high,)):  # type: ignore[attr-defined]
            replace(cast(Any, param), low=low, high=high)  # a SpaceError names the end that breaks the rule
    when = base.when if isinstance(base, ConditionalParam) else ()
    has_default = isinstance(base, ConditionalParam) and base.has_default
    return ConditionalParam(
        name,
        param,
        when,
        has_default,
        base.default if isinstance(base, ConditionalParam) and has_default else None,
        bounds=tuple(refs.items()),
    )


def _is_repeated(name: str, value: Any) -> bool:
    repeat = isinstance(value, Mapping) and "repeat" in value
    if repeat != (REPEAT_INDEX in name):
        raise SpaceError(
            name,
            f'a repeated parameter has both {REPEAT_INDEX} in its name and repeat = "<count '
            f'parameter>", e.g. "n_units_l{{i}}" = {{ ..., repeat = "n_layers" }}',
        )
    return repeat


def _repeated(name: str, value: Mapping[str, Any], singles: Mapping[str, Param]) -> list[Param]:
    """``n_units_l{i}`` repeated over ``n_layers``: ``n_units_l0`` ... up to the largest count, each searched
    when ``n_layers > i`` (always, below the smallest count), with the table's own ``when`` added."""
    count = value["repeat"]
    if not isinstance(count, str) or count not in singles:
        raise SpaceError(f"{name}.repeat", f"must name another parameter; {did_you_mean(str(count), singles)}")
    counts = _counts(singles[count], f"{name}.repeat")
    own = dict(value.get("when") or {}) if isinstance(value.get("when") or {}, Mapping) else None
    if own is None or count in own:
        raise SpaceError(f"{name}.when", f"must be a table that does not name {count!r} (repeat does)")
    table = {k: v for k, v in value.items() if k not in ("repeat", "when")}
    out = []
    for i in range(max(counts)):
        when = {**own, **({} if i < min(counts) else {count: {">": i}})}
        out.append(_parse_param(name.replace(REPEAT_INDEX, str(i)), {**table, **({"when": when} if when else {})}))
    return out


def _counts(param: Param, key: str) -> tuple[int, ...]:
    """The integer values a count parameter can take (int, categorical of ints, fixed; conditional or not)."""
    inner = param.param if isinstance(param, ConditionalParam) else param
    if isinstance(inner, FixedParam):
        values: tuple[Any, ...] = (inner.value,)
    elif isinstance(inner, IntParam):
        values = tuple(range(inner.low, inner.high + 1, inner.step))
    elif isinstance(inner, CategoricalParam):
        values = inner.choices
    else:
        values = ()
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        raise SpaceError(key, f"{param.name!r} must be an int, fixed or categorical parameter of counts >= 0")
    return tuple(int(v) for v in values)
