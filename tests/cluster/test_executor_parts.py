"""The executor is a hub of parts (cluster/executor.py's docstring): a short class, and every message a worker sends
goes through one typed module."""

from __future__ import annotations

import ast
from pathlib import Path

CLUSTER = Path(__file__).resolve().parents[2] / "cluster"
MAX_EXECUTOR_LINES = 150


def _class_lines(path: Path, name: str) -> int:
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    return int(node.end_lineno or 0) - node.lineno + 1


def _log_event_callers(sources: dict[str, str]) -> set[str]:
    """The modules that call ``<something>.log_event(...)``."""
    return {
        name
        for name, text in sources.items()
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "log_event"
    }


def test_the_dask_executor_class_is_short() -> None:
    assert _class_lines(CLUSTER / "executor.py", "DaskExecutor") < MAX_EXECUTOR_LINES


def test_workers_send_only_typed_messages() -> None:
    sources = {path.stem: path.read_text() for path in sorted(CLUSTER.glob("*.py"))}
    assert _log_event_callers(sources) == {"worker_messages"}


def test_the_checks_catch_what_they_look_for(tmp_path: Path) -> None:
    (tmp_path / "short.py").write_text("class DaskExecutor:\n    a = 1\n")
    assert _class_lines(tmp_path / "short.py", "DaskExecutor") == 2
    raw = "def f(worker):\n    worker.log_event('t', {'number': 1, 'outcome': {}})\n"
    assert _log_event_callers({"raw": raw, "typed": "send(worker, 't', m)\n"}) == {"raw"}
