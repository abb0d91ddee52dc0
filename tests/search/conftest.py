"""Shared helpers for controller tests: spec files and a clean process check."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# The shared helpers (toy_trainers, fault_trainers, toy_specs, ...) live here and are imported by bare name,
# also from the subfolders (tests/search/loop, ...) and by specs (entry = "toy_trainers:fit").
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    """Environment for CLI subprocesses: the toy trainers importable, no progress redraws."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(ROOT), env.get("PYTHONPATH", "")])
    return env


@pytest.fixture(name="toy_spec")
def toy_spec_fixture() -> Callable[..., dict[str, Any]]:
    """``toy_spec(**overrides)``: the toy spec as a dict (``toy_specs.toy_spec``; its TOML text is ``toy_toml``)."""
    from toy_specs import toy_spec

    return toy_spec
