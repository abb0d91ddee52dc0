"""The search space: its parameters in dependency order, sampled through an Optuna trial or a sampler's flat
values."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from spaces.conditional import ConditionalParam, same_value, value_of
from spaces.conditions import Comparison, matches
from spaces.errors import (
    SpaceError,
    did_you_mean,
    shown,
)
from spaces.scalar_params import (
    BatchSizeParam,
    CategoricalParam,
    FixedParam,
    IntParam,
    Param,
    Scalar,
)

__all__ = ["SearchSpace"]


def _allowed_values(param: Param, key: str, values: tuple[Scalar, ...]) -> tuple[Scalar, ...]:
    """A condition's values, checked against what the parameter it names can take, as that parameter's builtins."""
    inner = param.param if isinstance(param, ConditionalParam) else param
    if isinstance(inner, FixedParam):
        if not matches(inner.value, values, same_value):
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
        if not any(same_value(value, p) for p in possible):
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
                values[name] = value_of(param, trial.params)

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
            values[name] = value_of(param, sampled)
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
