"""DESIGN.md's dependency table, enforced on the code: who may import whom."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# package -> (top-level modules it must never import, anywhere in a file)
FORBIDDEN_ANYWHERE = {
    "spaces": {"torch", "dask", "distributed", "search", "trainers", "cluster"},
    "trainers": {"dask", "distributed", "optuna", "search", "cluster"},
    "cluster": {"optuna", "search"},
    "search": {"dask", "distributed"},
}
# package -> modules it may import only inside a function (lazily, at run time, by name)
FORBIDDEN_AT_IMPORT_TIME = {
    "cluster": {"torch", "trainers"},
    "search": {"trainers", "torch"},
}
# optuna submodules spaces may use
SPACES_OPTUNA_ALLOWED = {"optuna.distributions"}


def imports(tree: ast.AST) -> list[tuple[str, bool, int]]:
    """(module, at_module_level, line) for every import statement."""
    found: list[tuple[str, bool, int]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((alias.name, top, child.lineno) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.extend((f"{child.module}.{alias.name}", top, child.lineno) for alias in child.names)
            visit(child, nested)

    visit(tree, True)
    return found


# torch-free modules of a lazily imported package that may be imported at import time
ALLOWED_AT_IMPORT_TIME = {"trainers.api"}  # the trial config and reporter contract (no torch: tested below)


def _allowed_early(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in ALLOWED_AT_IMPORT_TIME)


def violations(package: str) -> list[str]:
    bad: list[str] = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for module, top, line in imports(ast.parse(path.read_text(), str(path))):
            head = module.split(".")[0]
            where = f"{path.relative_to(ROOT)}:{line} imports {module}"
            if head in FORBIDDEN_ANYWHERE.get(package, set()):
                bad.append(where)
            elif top and head in FORBIDDEN_AT_IMPORT_TIME.get(package, set()) and not _allowed_early(module):
                bad.append(where + " at import time")
            elif package == "spaces" and head == "optuna":
                if not any(module == m or module.startswith(m + ".") for m in SPACES_OPTUNA_ALLOWED):
                    bad.append(where + " (spaces may use optuna.distributions only)")
    return bad


@pytest.mark.parametrize("package", ["spaces", "trainers", "cluster", "search"])
def test_package_respects_the_dependency_table(package: str) -> None:
    assert violations(package) == []


def test_the_checker_catches_a_violation(tmp_path: Path) -> None:
    tree = ast.parse("import os\nfrom distributed import Client\ndef f():\n    import torch\n")
    assert imports(tree) == [("os", True, 1), ("distributed.Client", True, 2), ("torch", False, 4)]


def test_importing_cluster_and_trainers_api_does_not_load_torch_or_optuna() -> None:
    code = (
        "import sys, cluster, trainers, trainers.api\n"
        "bad = sorted(m for m in ('torch', 'optuna') if m in sys.modules)\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


# --- no import cycle, between modules or between subpackages, anywhere in the project ---------------------

PROJECT_PACKAGES = ("search", "spaces", "trainers", "cluster")


def module_names(root: Path, packages: tuple[str, ...] = PROJECT_PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``packages`` under ``root`` (a package by its name)."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` that can run: ``if TYPE_CHECKING:`` bodies are annotations, never imported."""
    nodes: list[ast.AST] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        nodes.append(node)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return nodes


def _imported(module: str, is_package: bool, tree: ast.AST, modules: set[str]) -> set[str]:
    """The project modules ``module`` imports at run time: at module level or inside a function."""

    def known(name: str) -> str | None:  # the module itself, else the package that holds the name
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    here = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            found.update(filter(None, (known(alias.name) for alias in node.names)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")[: len(here.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                target = f"{base}.{alias.name}"
                name = target if target in modules else known(base)
                if name:
                    found.add(name)
    return found - {module}


def import_graph(root: Path, packages: tuple[str, ...] = PROJECT_PACKAGES) -> dict[str, set[str]]:
    """module -> the project modules it imports (lazily too)."""
    files = module_names(root, packages)
    modules = set(files)
    return {
        name: _imported(name, path.name == "__init__.py", ast.parse(path.read_text(), str(path)), modules)
        for name, path in files.items()
    }


def package_graph(graph: dict[str, set[str]], root: Path) -> dict[str, set[str]]:
    """subpackage -> the subpackages its modules import (a module counts for the package that holds it)."""

    def package_of(module: str) -> str:
        if (root / module.replace(".", "/") / "__init__.py").is_file():
            return module
        return module.rpartition(".")[0] or module

    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        mine = package_of(module)
        packages.setdefault(mine, set()).update(package_of(t) for t in targets)
    return {name: targets - {name} for name, targets in packages.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one node (each one or more import cycles)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_between_modules_anywhere() -> None:
    assert cycles(import_graph(ROOT)) == []


@pytest.mark.slow
def test_no_import_cycle_between_subpackages_anywhere() -> None:
    """The subpackages are layers: e.g. search.spec below search.store below search.loop below search.session."""
    assert cycles(package_graph(import_graph(ROOT), ROOT)) == []


def test_the_cycle_checker_finds_lazy_relative_and_package_cycles(tmp_path: Path) -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/low/__init__.py": "",
        "pkg/low/a.py": "def f():\n    from pkg.high import b\n",  # lazily, inside a function
        "pkg/high/__init__.py": "",
        "pkg/high/b.py": "from ..low import c\n",  # relative
        "pkg/low/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.high import b\n",
        "pkg/low/d.py": "import pkg.low.a\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.low.a"] == {"pkg.high.b"} and graph["pkg.high.b"] == {"pkg.low.c"}
    assert graph["pkg.low.c"] == set()  # a TYPE_CHECKING import never runs
    assert cycles(graph) == []
    assert cycles(package_graph(graph, tmp_path)) == [["pkg.high", "pkg.low"]]  # a -> b -> c: low <-> high
    (tmp_path / "pkg/low/c.py").write_text("import pkg.low.d\n")  # c -> d -> a -> b -> c
    assert cycles(import_graph(tmp_path, ("pkg",))) == [["pkg.high.b", "pkg.low.a", "pkg.low.c", "pkg.low.d"]]
