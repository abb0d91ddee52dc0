"""What a ``when`` condition may say of another parameter: values it must be one of, or comparisons.

```toml
hidden = { type = "int", low = 32, high = 256, when = { model = "mlp" } }          # one value
dropout = { type = "float", low = 0.0, high = 0.5, when = { depth = [3, 4] } }      # one of several
extra = { type = "float", low = 0.0, high = 1.0, when = { n_layers = { ">=" = 3 } } }   # comparisons:
window = { type = "int", low = 1, high = 8, when = { n_layers = { ">" = 1, "<=" = 4 } } } # all must hold
```

A :class:`Comparison` holds for a value when every one of its ``(operator, operand)`` tests does;
``<``, ``<=``, ``>``, ``>=`` compare numbers (never a bool), ``==`` and ``!=`` any scalar.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from spaces.errors import SpaceError, shown

__all__ = ["Comparison", "OPERATORS", "parse_comparison", "matches", "describe"]

OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}
_ORDERING = (">", ">=", "<", "<=")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class Comparison:
    """``tests``: ``((operator, operand), ...)``, e.g. ``((">=", 3),)``; it holds when all do."""

    tests: tuple[tuple[str, Any], ...]

    def __post_init__(self) -> None:
        if not self.tests:
            raise SpaceError("when", 'a comparison needs at least one operator, e.g. { ">=" = 3 }')
        for op, operand in self.tests:
            if op not in OPERATORS:
                raise SpaceError("when", f"{op!r} is not one of {', '.join(OPERATORS)}")
            if op in _ORDERING and not _number(operand):
                raise SpaceError("when", f"{op!r} compares numbers; got {shown(operand)}")

    def holds_for(self, value: Any) -> bool:
        for op, operand in self.tests:
            if op in _ORDERING and not _number(value):
                return False
            if op in ("==", "!=") and isinstance(value, bool) != isinstance(operand, bool):
                if op == "==":
                    return False
                continue  # a bool is never equal to a number: "!=" holds
            if not OPERATORS[op](value, operand):
                return False
        return True

    def __str__(self) -> str:
        return " and ".join(f"{op} {operand!r}" for op, operand in self.tests)


def parse_comparison(key: str, table: Mapping[str, Any]) -> Comparison:
    """``{ ">=" = 3, "<" = 6 }`` as a :class:`Comparison`; one-line errors naming ``key``."""
    for op in table:
        if op not in OPERATORS:
            raise SpaceError(key, f"{op!r} is not a comparison; use one of {', '.join(OPERATORS)}")
    try:
        return Comparison(tuple((str(op), value) for op, value in table.items()))
    except SpaceError as exc:
        raise SpaceError(key, exc.problem) from None


def matches(value: Any, allowed: tuple[Any, ...], same: Callable[[Any, Any], bool]) -> bool:
    """Whether ``value`` is one of ``allowed`` (``same``) or satisfies a comparison among them."""
    return any(a.holds_for(value) if isinstance(a, Comparison) else same(value, a) for a in allowed)


def describe(name: str, allowed: tuple[Any, ...]) -> str:
    """The condition on ``name`` as a reader writes it: ``depth = 3``, ``depth in [2, 3]``, ``depth >= 3``."""
    if len(allowed) == 1 and isinstance(allowed[0], Comparison):
        return " and ".join(f"{name} {op} {operand!r}" for op, operand in allowed[0].tests)
    return f"{name} = {allowed[0]!r}" if len(allowed) == 1 else f"{name} in {list(allowed)!r}"
