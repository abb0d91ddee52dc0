"""trainers imports torch and spaces only, and ``import trainers`` does not import torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import trainers

FORBIDDEN = {"dask", "distributed", "optuna", "search", "cluster"}
PACKAGE = Path(trainers.__file__).parent


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_no_forbidden_imports() -> None:
    offenders = {p.name: _imported_roots(p) & FORBIDDEN for p in PACKAGE.glob("*.py")}
    assert {name: bad for name, bad in offenders.items() if bad} == {}


def test_import_trainers_is_cheap() -> None:
    code = "import sys, trainers; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
