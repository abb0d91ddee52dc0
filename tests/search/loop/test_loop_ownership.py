"""One owner per trial state: only search/loop/trials.py writes a RunningTrial; policies write nothing."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from search.loop.trials import RunningTrial

ROOT = Path(__file__).resolve().parents[3]
FIELDS = {f.name for f in dataclasses.fields(RunningTrial)}
MUTATORS = {"append", "add", "update", "extend", "discard", "remove", "pop", "clear", "insert"}
OWNER = ROOT / "search" / "loop" / "trials.py"
POLICIES = [ROOT / "search" / "loop" / "policies.py", ROOT / "search" / "pbt" / "policy.py"]


def field_writes(source: str) -> list[str]:
    """``x.<field> = ...``, ``x.<field> += ...`` and ``x.<field>.append(...)`` on any name but ``self``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = [t for tg in node.targets for t in (tg.elts if isinstance(tg, ast.Tuple) else [tg])]
        elif isinstance(node, ast.AugAssign):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            targets = [node.func.value]
        for target in targets:
            on_self = (
                isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
            )
            if isinstance(target, ast.Attribute) and target.attr in FIELDS and not on_self:
                found.append((node.lineno, f"{node.lineno}: .{target.attr}"))
    return [where for _line, where in sorted(found)]


def loop_modules() -> list[Path]:
    """The modules that can hold a RunningTrial: the loop's and PBT's own, and any other that names it."""
    paths = sorted((ROOT / "search").rglob("*.py"))
    return [p for p in paths if {"loop", "pbt"} & set(p.parts) or "RunningTrial" in p.read_text()]


def test_only_the_trials_module_writes_a_running_trial() -> None:
    modules = loop_modules()
    assert ROOT / "search" / "loop" / "dispatch.py" in modules and ROOT / "search" / "loop" / "stops.py" in modules
    writes = {str(p.relative_to(ROOT)): hits for p in modules if p != OWNER and (hits := field_writes(p.read_text()))}
    assert writes == {}


def test_the_check_sees_each_kind_of_write() -> None:
    source = "r.stop_reason = 'x'\nr.attempts += 1\nr.reports.append(1)\na.worker, b = '', 1\nself.task = 0\n"
    assert field_writes(source) == ["1: .stop_reason", "2: .attempts", "3: .reports", "4: .worker"]


def test_policies_write_no_storage() -> None:
    """They return their decision and the attributes to record; the campaign writes them."""
    for path in POLICIES:
        text = path.read_text()
        assert "write_attrs" not in text and "set_user_attr" not in text and ".tell(" not in text, path
