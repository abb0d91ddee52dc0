"""The declared floors are the tested ones: pyproject.toml's lower bound of each core dependency, the pins of CI's
floor session (.ci/floors.txt) and the floors ``hypersweep check`` compares against (search.compat.versions.TESTED)
are one list."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from search.compat.versions import CORE, TESTED

ROOT = Path(__file__).resolve().parents[1]


def _release(version: str) -> tuple[int, ...]:
    parts = tuple(int(p) for p in version.split("."))
    return parts + (0,) * (3 - len(parts))


def declared_floors() -> dict[str, tuple[int, ...]]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    found = {}
    for dep in deps:
        match = re.match(r"([\w-]+)>=([\d.]+)", dep)
        if match and match.group(1) in CORE:
            found[match.group(1)] = _release(match.group(2))
    return found


def test_every_core_dependency_declares_a_floor() -> None:
    assert set(declared_floors()) == set(CORE)


def test_the_floor_session_installs_exactly_the_declared_floors() -> None:
    pins = dict(re.findall(r"^([\w-]+)==(\S+)$", (ROOT / ".ci" / "floors.txt").read_text(), re.M))
    assert {name: _release(v) for name, v in pins.items()} == declared_floors()


def test_check_compares_with_the_declared_floors() -> None:
    assert {name: _release(low) for name, (low, _high) in TESTED.items()} == declared_floors()
    assert all(_release(low) <= _release(high) for low, high in TESTED.values())


def test_torch_is_declared_as_the_range_tested() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (torch,) = [d for d in deps if d.startswith("torch")]
    assert torch == "torch>=2.13,<2.14" and TESTED["torch"] == ("2.13.0", "2.13.0")
