"""A test's controller in a process of its own that kills itself (SIGKILL) at a chosen moment: its exit status,
with whatever it left running (its Dask workers) ended with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def killed_run(module: str, *args: str, timeout: float = 400) -> int:
    """Run ``python -m module *args`` from the repository root in its own session: its exit status (``timeout``
    seconds at most); its session's processes are killed afterwards, nothing else."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT, env=env, start_new_session=True)
    try:
        return proc.wait(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: the workers it started, nothing else
        except ProcessLookupError:
            pass
