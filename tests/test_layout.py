"""The code layout docs/contributing.md promises: small modules (docstrings aside), a short controller."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 500
MAX_CAMPAIGN_LINES = 300
#: Every package of the project, its benchmarks and its tests: each module under MAX_MODULE_LINES.
PACKAGES = ("search", "cluster", "spaces", "trainers", "bench", "tests")


def _code_lines(path: Path) -> int:
    """Lines of a module outside its docstrings (module, class, function and attribute docstrings)."""
    text = path.read_text()
    docstrings = (
        n
        for n in ast.walk(ast.parse(text))
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
    )
    return len(text.splitlines()) - sum(int(n.end_lineno or n.lineno) - n.lineno + 1 for n in docstrings)


def _long_modules(package: Path, limit: int) -> list[str]:
    return [
        f"{path.relative_to(package.parent)}: {n} lines"
        for path in sorted(package.rglob("*.py"))
        if (n := _code_lines(path)) > limit
    ]


def _class_lines(path: Path, name: str) -> int:
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    return int(node.end_lineno or 0) - node.lineno + 1


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_is_over_500_lines(package: str) -> None:
    assert _long_modules(ROOT / package, MAX_MODULE_LINES) == []


def test_every_package_is_covered() -> None:
    packages = {path.parent.name for path in ROOT.glob("*/__init__.py")}
    assert packages <= set(PACKAGES), f"add {sorted(packages - set(PACKAGES))} to PACKAGES"


def test_the_campaign_class_is_under_300_lines() -> None:
    assert _class_lines(ROOT / "search" / "loop" / "campaign.py", "Campaign") < MAX_CAMPAIGN_LINES


def test_the_checks_catch_what_they_look_for(tmp_path: Path) -> None:
    (tmp_path / "long.py").write_text("x = 1\n" * 501)
    (tmp_path / "documented.py").write_text('"""A module."""\n' + 'x = 1\n"""x\'s\ndocstring."""\n' * 250)
    (tmp_path / "short.py").write_text("class Campaign:\n    a = 1\n    b = 2\n")
    assert _long_modules(tmp_path, MAX_MODULE_LINES) == [f"{tmp_path.name}/long.py: 501 lines"]
    assert _class_lines(tmp_path / "short.py", "Campaign") == 3
