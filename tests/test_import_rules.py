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
