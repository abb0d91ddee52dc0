"""STYLE.md point 10, as a test: Optuna's private API is reached only through search.compat.optuna_private.

Outside that module no file of the packages (or bench/) imports a private Optuna module or name, or reads a private
Optuna attribute off an object; a class that subclasses an Optuna class uses only the private members of it that the
seam declares (``MEMBERS``) and checks at start.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from functools import cache
from pathlib import Path

import optuna
import pytest

from search.compat import optuna_private

ROOT = Path(__file__).resolve().parents[1]
SEAM = ROOT / "search" / "compat" / "optuna_private.py"
PACKAGES = ("search", "spaces", "trainers", "cluster", "bench")
_SELF_ATTR = re.compile(r"\bself\.(_[a-z]\w*)")
_PRIVATE_DEF = re.compile(r"\bdef (_[a-z]\w*)")


@cache
def optuna_private_names() -> frozenset[str]:
    """Every private attribute, method and module-level name that Optuna's source defines."""
    names: set[str] = set()
    for path in Path(optuna.__file__).parent.rglob("*.py"):
        text = path.read_text()
        names |= set(_SELF_ATTR.findall(text)) | set(_PRIVATE_DEF.findall(text))
        names |= set(re.findall(r"^(_[A-Za-z]\w*)\s*[:=]", text, re.M))
    return frozenset(names)


def _is_private_import(node: ast.AST) -> str | None:
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.split(".")[0] == "optuna":
        if any(part.startswith("_") for part in node.module.split(".")):
            return node.module
        private = [a.name for a in node.names if a.name.startswith("_")]
        return f"{node.module}.{private[0]}" if private else None
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.split(".")[0] == "optuna" and any(p.startswith("_") for p in alias.name.split(".")):
                return alias.name
    return None


def _is_self(node: ast.expr) -> bool:
    if isinstance(node, ast.Name) and node.id in ("self", "cls"):
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def outside_reads(tree: ast.AST, where: str) -> list[str]:
    """Private Optuna imports, and private Optuna attributes read off anything but ``self``/``super()``."""
    bad = []
    private = optuna_private_names()
    for node in ast.walk(tree):
        module = _is_private_import(node)
        if module:
            bad.append(f"{where}:{node.lineno} imports {module}")  # type: ignore[attr-defined]
        if isinstance(node, ast.Attribute) and node.attr in private and not _is_self(node.value):
            bad.append(f"{where}:{node.lineno} reads {ast.unparse(node)}")
    return bad


@cache
def _members_of(cls: type) -> frozenset[str]:
    """The private names an Optuna class's own source defines (``self._x``, ``def _x``)."""
    try:
        text = inspect.getsource(cls)
    except (OSError, TypeError):
        return frozenset()
    return frozenset(_SELF_ATTR.findall(text)) | frozenset(_PRIVATE_DEF.findall(text))


def _declared(cls: type) -> set[str]:
    allowed: set[str] = set()
    for dotted, names in optuna_private.MEMBERS.items():
        module, _, name = dotted.rpartition(".")
        if getattr(importlib.import_module(module), name) in cls.__mro__:
            allowed |= set(names)
    return allowed


def subclass_uses(path: Path, tree: ast.Module) -> list[str]:
    """In each class with an Optuna class in its MRO: ``self._x`` where ``_x`` is that Optuna class's, undeclared."""
    bad = []
    module_name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    if not classes:
        return bad
    module = importlib.import_module(module_name)
    for node in classes:
        cls = getattr(module, node.name, None)
        if not isinstance(cls, type):
            continue
        bases = [c for c in cls.__mro__ if c.__module__.split(".")[0] == "optuna"]
        theirs = frozenset().union(*map(_members_of, bases)) if bases else frozenset()
        allowed = _declared(cls)
        for sub in ast.walk(node):
            used = sub.attr if isinstance(sub, ast.Attribute) and _is_self(sub.value) else None
            if isinstance(sub, ast.FunctionDef) and sub in node.body:
                used = sub.name  # an override of a private method: Optuna calls it
            if used in theirs - allowed:
                bad.append(f"{path.relative_to(ROOT)}:{sub.lineno} {node.name} uses {used} of an Optuna base")
    return bad


def files() -> list[Path]:
    return [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py")) if p != SEAM]


def optuna_users() -> list[Path]:
    """The modules of the packages that import Optuna (only they can subclass its classes)."""
    return [p for p in files() if p.parts[len(ROOT.parts)] != "bench" and "optuna" in p.read_text()]


@pytest.mark.slow  # reads all of Optuna's source
def test_no_module_outside_the_seam_reads_optunas_private_api() -> None:
    bad: list[str] = []
    for path in files():
        bad += outside_reads(ast.parse(path.read_text(), str(path)), str(path.relative_to(ROOT)))
    assert bad == []


@pytest.mark.slow  # imports every module that imports Optuna
def test_subclasses_of_optuna_classes_use_only_declared_private_members() -> None:
    bad: list[str] = []
    for path in optuna_users():
        bad += subclass_uses(path, ast.parse(path.read_text(), str(path)))
    assert bad == []


def test_the_checker_catches_each_kind_of_private_use() -> None:
    code = (
        "from optuna.study._tell import _tell_with_warning\n"
        "from optuna.distributions import _get_single_value\n"
        "import optuna.samplers._tpe.sampler\n"
        "def f(study, self):\n"
        "    self._storage\n"
        "    return study._storage, study.trials\n"
    )
    found = outside_reads(ast.parse(code), "x.py")
    assert found == [
        "x.py:1 imports optuna.study._tell",
        "x.py:2 imports optuna.distributions._get_single_value",
        "x.py:3 imports optuna.samplers._tpe.sampler",
        "x.py:6 reads study._storage",
    ]


def test_the_declared_members_are_checked_by_the_seam() -> None:
    """Every declared member belongs to a family, whose check looks at it on a fresh instance."""
    assert set(optuna_private.MEMBERS) == set(optuna_private._FAMILY_OF_BASE)
    for dotted, names in optuna_private.MEMBERS.items():
        module, _, name = dotted.rpartition(".")
        cls = getattr(importlib.import_module(module), name)
        assert all(n.startswith("_") for n in names) and cls.__module__.startswith("optuna")
