"""Reading TOML tables for the spec: typed getters and one-line errors naming file and key."""

from __future__ import annotations

import builtins
import difflib
import math
import re
from collections.abc import Mapping
from typing import Any

from spaces.errors import InputError

__all__ = ["SpecError", "SpecTable", "clip"]

#: The longest word (a value, a key) an error message repeats in full; longer ones are cut in the middle.
LONGEST_SHOWN = 160


def clip(text: str, width: int = LONGEST_SHOWN) -> str:
    """``text`` with every word longer than ``width`` cut in the middle (``abc...xyz (10000 chars)``)."""

    def cut(match: re.Match[str]) -> str:
        word = match.group(0)
        half = (width - 3) // 2
        return f"{word[:half]}...{word[-half:]} ({len(word)} chars)"

    return re.sub(rf"\S{{{width + 1},}}", cut, text)


def _one_line(text: str, longest: int) -> str:
    """``text`` clipped (:func:`clip`) on one line, at most ``longest`` characters."""
    text = clip(" ".join(text.split()))
    return text if len(text) <= longest else text[: longest - 3] + "..."


class SpecError(InputError):
    """A spec mistake, as one line: ``file: key: problem`` (a ``ValueError``; exit status 2).

    Long keys and values are cut (:func:`clip`), so that a 10,000-character value is not echoed in full.
    """

    def __init__(self, source: str, key: str, problem: str) -> None:
        self.source, self.key, self.problem = source, key, problem
        super().__init__(f"{source}: {_one_line(key, 200)}: {_one_line(problem, 500)}")

    def __reduce__(self) -> tuple[type[SpecError], tuple[str, str, str]]:
        return (type(self), (self.source, self.key, self.problem))


class SpecTable:
    """A TOML table being read: typed getters, and a check for keys nobody read."""

    def __init__(self, source: str, prefix: str, data: Any, allowed: tuple[str, ...]) -> None:
        if not isinstance(data, Mapping):
            raise SpecError(source, prefix, f"must be a table, got {type(data).__name__}")
        self.source, self.prefix, self.data = source, prefix, data
        for key in data:
            if key not in allowed:
                raise SpecError(source, self.key(key), f"unknown key{_closest(key, allowed)}")

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name

    def error(self, name: str, problem: str) -> SpecError:
        return SpecError(self.source, self.key(name), problem)

    def has(self, name: str) -> bool:
        return name in self.data

    def str(self, name: str, default: str | None = None) -> str:
        value = self._get(name, default)
        if not isinstance(value, str):
            raise self.error(name, f"must be a string, got {_show(value)}")
        return value

    def bool(self, name: builtins.str, default: bool) -> bool:
        value = self._get(name, default)
        if not isinstance(value, bool):
            raise self.error(name, f"must be true or false, got {_show(value)}")
        return value

    def int(
        self, name: builtins.str, default: int | None = None, minimum: int | None = None, maximum: int | None = None
    ) -> int:
        value = self._get(name, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(name, f"must be an integer, got {_show(value)}")
        if minimum is not None and value < minimum:
            raise self.error(name, f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise self.error(name, f"must be <= {maximum:,}, got {value:,}")
        return value

    def float(self, name: builtins.str, default: float | None = None, minimum: float | None = None) -> float:
        value = self._get(name, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.error(name, f"must be a finite number, got {_show(value)}")
        if minimum is not None and value < minimum:
            raise self.error(name, f"must be >= {minimum:g}, got {value:g}")
        return float(value)

    def choice(
        self, name: builtins.str, choices: tuple[builtins.str, ...], default: builtins.str | None = None
    ) -> builtins.str:
        value = self.str(name, default)
        if value not in choices:
            raise self.error(name, f"{value!r} is not one of {', '.join(choices)}{_closest(value, choices)}")
        return value

    def table(self, name: builtins.str) -> Mapping[builtins.str, Any]:
        value = self.data.get(name, {})
        if not isinstance(value, Mapping):
            raise self.error(name, f"must be a table, got {_show(value)}")
        return value

    def _get(self, name: builtins.str, default: Any) -> Any:
        if name in self.data:
            return self.data[name]
        if default is None:
            raise self.error(name, "is required")
        return default


def _closest(word: str, choices: tuple[str, ...] | list[str]) -> str:
    match = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else f" (valid: {', '.join(choices)})"


def _show(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"
