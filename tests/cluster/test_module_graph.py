"""cluster's own modules import each other without a cycle; imports inside functions and TYPE_CHECKING blocks count."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "cluster"


def local_imports(source: str, modules: set[str]) -> set[str]:
    """The package's modules ``source`` imports anywhere (``__init__`` for the package itself)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    found.add(alias.name.split(".")[1] if "." in alias.name else "__init__")
            continue
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level == 1:
            base = node.module or ""
        elif node.level == 0 and node.module and (node.module == PACKAGE or node.module.startswith(PACKAGE + ".")):
            base = node.module[len(PACKAGE) + 1 :]
        else:
            continue
        if base:
            found.add(base.split(".")[0])
        else:  # from . import x / from cluster import x: a submodule, or a name from the package itself
            found.update(alias.name if alias.name in modules else "__init__" for alias in node.names)
    return found


def module_graph(sources: Mapping[str, str]) -> dict[str, set[str]]:
    modules = set(sources)
    return {name: local_imports(text, modules) & modules - {name} for name, text in sources.items()}


def find_cycle(graph: Mapping[str, set[str]]) -> list[str]:
    """One import cycle as a path (first module repeated at the end), or [] when the graph is acyclic."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return []

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return []


def cluster_sources() -> dict[str, str]:
    return {path.stem: path.read_text() for path in sorted((ROOT / PACKAGE).glob("*.py"))}


def test_cluster_modules_import_each_other_without_a_cycle() -> None:
    graph = module_graph(cluster_sources())
    assert find_cycle(graph) == [], " -> ".join(find_cycle(graph))
    # The shared types sit below both: backends and connect meet in errors/options, never in each other.
    assert "connect" not in graph["backends"]
    assert {"errors", "options"} <= graph["backends"] and not graph["errors"]


def test_the_checker_sees_imports_inside_functions_and_type_checking_blocks() -> None:
    sources = {
        "__init__": "from .connect import open_cluster\n",
        "connect": "def open_cluster():\n    from .backends import open_backend\n",
        "backends": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cluster.connect import Options\n",
        "errors": "import os\n",
    }
    graph = module_graph(sources)
    assert graph == {"__init__": {"connect"}, "connect": {"backends"}, "backends": {"connect"}, "errors": set()}
    cycle = find_cycle(graph)
    assert cycle[0] == cycle[-1] and set(cycle) == {"backends", "connect"}
    assert find_cycle(module_graph({"a": "from . import b\n", "b": "import cluster.c\n", "c": "x = 1\n"})) == []
    assert local_imports("from cluster import ClusterError\n", {"errors"}) == {"__init__"}
