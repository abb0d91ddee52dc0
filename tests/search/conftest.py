"""Shared helpers for controller tests: spec files and a clean process check."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    """Environment for CLI subprocesses: the toy trainers importable, no progress redraws."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(ROOT), env.get("PYTHONPATH", "")])
    return env
