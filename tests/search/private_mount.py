"""Scenarios run under ``unshare -m``: a private mount namespace, where a scenario mounts a file system of its own
(a small tmpfs that fills, one turned read-only) without touching the machine's. Needs root or user namespaces."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

__all__ = ["can_mount_tmpfs", "needs_private_mount", "run_scenario"]

SCENARIOS = Path(__file__).resolve().parent  # tests/search: disk_full_scenario.py, read_only_scenario.py


def can_mount_tmpfs() -> bool:
    """Whether this machine lets ``unshare -m`` mount a tmpfs."""
    if shutil.which("unshare") is None:
        return False
    probe = "d=$(mktemp -d) && mount -t tmpfs -o size=1m tmpfs $d && umount $d"
    return subprocess.run(["unshare", "-m", "sh", "-c", probe], capture_output=True).returncode == 0


needs_private_mount = pytest.mark.skipif(
    not can_mount_tmpfs(), reason="needs a private mount namespace (unshare -m) to mount a file system of its own"
)


def run_scenario(script: str, folder: Path, env: dict[str, str], timeout: float = 580) -> dict[str, Any]:
    """Run ``tests/search/<script> folder`` under ``unshare -m``; what it found: its last line of output, a JSON
    object. The scenario itself must exit 0 (its stderr's end is the assertion's message)."""
    done = subprocess.run(
        ["unshare", "-m", sys.executable, str(SCENARIOS / script), str(folder)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
