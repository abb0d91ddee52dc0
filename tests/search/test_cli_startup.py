"""Mistakes and Ctrl-C before a campaign starts are one line (issue 47.8): a scheduler address that is not one
(exit 2), Ctrl-C while the command imports (exit 130)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dask_processes import wait_for
from toy_specs import toy_toml

from spaces.errors import EXIT_INPUT, EXIT_INTERRUPTED


def hypersweep(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "search", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("not a url", " (no such file)"),
        ("missing.json", " (no such file)"),
        ("tcp://127.0.0.1", " (needs a host and a port number)"),
        ("http://127.0.0.1:8786", ""),
    ],
)
def test_run_with_a_scheduler_that_is_no_address_is_one_line_and_exit_2_before_anything_is_made(
    tmp_path: Path, subprocess_env: dict[str, str], address: str, why: str
) -> None:
    spec = tmp_path / "toy.toml"
    spec.write_text(toy_toml())
    proc = hypersweep(["run", str(spec), "--scheduler", address, "--runs-dir", str(tmp_path / "runs")], subprocess_env)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_INPUT, err
    rule = "must be tcp://host:port, tls://host:port or an existing scheduler file"
    assert err.splitlines() == [f"hypersweep: --scheduler {address!r}: {rule}{why}"]
    assert not (tmp_path / "runs").exists()


def python_catches_sigint(pid: int) -> bool:
    """Whether the process's interpreter is up: it has its SIGINT handler (SigCgt has signal 2)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught, 16) & (1 << (signal.SIGINT - 1)))


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc/<pid>/status")
def test_ctrl_c_while_the_command_imports_is_one_line_and_exit_130(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    spec = tmp_path / "toy.toml"
    spec.write_text(toy_toml())
    interrupted = 0
    for delay in (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8):  # from the moment the interpreter is up
        proc = hypersweep(["check", str(spec)], subprocess_env)
        wait_for(lambda p=proc: python_catches_sigint(p.pid) or p.poll() is not None, 60, "the interpreter")
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
        if proc.returncode == 0:  # it was done before the signal came
            continue
        assert proc.returncode == EXIT_INTERRUPTED, (delay, err)
        assert err.splitlines() == ["hypersweep: interrupted"], (delay, err)
        interrupted += 1
    assert interrupted >= 3
