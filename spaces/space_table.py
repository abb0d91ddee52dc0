"""Parsing a TOML ``[space]`` table into a :class:`~spaces.search_space.SearchSpace`; the table types' registry."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, cast

from spaces.conditional import ConditionalParam
from spaces.errors import (
    SpaceError,
    check_name,
    did_you_mean,
    shown,
)
from spaces.scalar_params import (
    SCALARS,
    BatchSizeParam,
    CategoricalParam,
    FixedParam,
    FloatParam,
    IntParam,
    Param,
)
from spaces.search_space import SearchSpace

__all__ = ["CONDITION_KEYS", "PARAM_TYPES", "REPEAT_INDEX", "ParamBuilder", "parse_space", "register_param_type"]


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
    if isinstance(value, SCALARS):
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
