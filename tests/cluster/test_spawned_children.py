"""After a Ctrl-C the command ends the processes it spawned before the interpreter's exit unlinks the semaphores
they were given (cluster.quiet_workers.end_spawned_children): a child still starting printed a FileNotFoundError
traceback under the command's one line (CI, once). Real spawned processes: a child slowed in its import of the
parent's script, the window a Dask worker's imports leave."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import multiprocessing as mp
import sys
import time

if __name__ == "__mp_main__":
    time.sleep(1.5)  # the child still imports its parent's script when the parent exits


def work(lock):
    pass


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    ctx.Process(target=work, args=(ctx.Lock(),), daemon=False).start()
    if sys.argv[1] == "ended":
        from cluster.quiet_workers import end_spawned_children

        end_spawned_children(timeout=10)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["left-to-the-exit", "ended"])
def test_a_child_still_starting_prints_nothing_once_ended(tmp_path: Path, how: str) -> None:
    script = tmp_path / "parent.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), how],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=50,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    if how == "ended":
        assert done.stderr == ""
    else:  # what the exit alone leaves: the child's traceback, once the parent's semaphore is gone
        assert "FileNotFoundError" in done.stderr
