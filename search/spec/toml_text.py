"""Specs written out as TOML (``search.run`` freezes a dict spec, or one with a trainer passed in Python, this way)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["to_toml"]

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def to_toml(data: Mapping[str, Any], header: str = "") -> str:
    """``data`` as TOML: a table per top-level mapping (``[study]``), inline tables below that.

    ``tomllib.loads(to_toml(d)) == d`` for the values a spec holds (str, bool, int, float, lists,
    mappings); ``None`` has no TOML form and is an error.
    """
    lines = [header] if header else []
    scalars = {k: v for k, v in data.items() if not isinstance(v, Mapping)}
    lines += [f"{_key(k)} = {_value(v, k)}" for k, v in scalars.items()]
    for name, table in data.items():
        if isinstance(table, Mapping):
            lines += ["", f"[{_key(name)}]"]
            lines += [f"{_key(k)} = {_value(v, f'{name}.{k}')}" for k, v in table.items()]
    return "\n".join(lines).lstrip("\n") + "\n"


def _key(key: Any) -> str:
    key = str(key)
    return key if _BARE_KEY.match(key) else json.dumps(key, ensure_ascii=False)


def _value(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return repr(value) if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v, f"{where}[{i}]") for i, v in enumerate(value)) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v, f'{where}.{k}')}" for k, v in value.items()) + " }"
    what = "None (TOML has no null: leave the key out)" if value is None else f"a {type(value).__name__}"
    raise TypeError(f"spec value at {where!r} is {what}")
