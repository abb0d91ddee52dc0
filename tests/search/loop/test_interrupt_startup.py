"""Ctrl-C while the embedded cluster starts (issue 47.8): the terminal's SIGINT reaches the whole foreground
process group, the worker processes just spawned included; the command still prints one line and exits 130, and
leaves no process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

DIGITS = Path(__file__).resolve().parents[3] / "examples" / "digits.toml"


def group(pgid: int) -> list[str]:
    """The command lines of the live processes of process group ``pgid`` (zombies left out)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # state, ppid, pgrp, ...
        if entry.name.isdigit() and fields[2] == str(pgid) and fields[0] != "Z":
            found.append(args)
    return found


def wait_for(predicate: Callable[[], object], timeout: float, what: str, every: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def workers_spawned(pgid: int) -> bool:
    return any("spawn_main" in args for args in group(pgid))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("after", [0.0, 0.3, 0.8], ids=lambda s: f"{s}s-after-a-worker-process-appears")
def test_ctrl_c_while_worker_processes_start_is_one_line(
    tmp_path: Path, subprocess_env: dict[str, str], after: float
) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "search",
            "run",
            str(DIGITS),
            "--workers",
            "2",
            "--runs-dir",
            str(tmp_path),
            "--no-progress",
        ],
        env=subprocess_env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a group of its own, as a terminal's foreground job
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # Ctrl-C at its default, as from a shell
    )
    pgid = proc.pid
    try:
        wait_for(lambda: workers_spawned(pgid), 60, "a worker process to be spawned", every=0.01)
        time.sleep(after)  # into the worker's Python start-up (~1-2 s here): its imports, then Dask's
        os.killpg(pgid, signal.SIGINT)  # what a terminal's Ctrl-C sends to its foreground group
        err = proc.communicate(timeout=60)[1]
        assert proc.returncode == 130, err
        assert len(err.splitlines()) == 1 and err.startswith("hypersweep: interrupted"), err
        wait_for(lambda: not group(pgid), 30, "every process of the command to exit")
    finally:
        if group(pgid):
            os.killpg(pgid, signal.SIGKILL)
        proc.wait(timeout=30)
