"""Shared helpers for controller tests: spec files and a clean process check."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def write_spec(path: Path, body: str) -> Path:
    path.write_text(textwrap.dedent(body))
    return path


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    """Environment for CLI subprocesses: the toy trainers importable, no progress redraws."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(ROOT), env.get("PYTHONPATH", "")])
    return env
