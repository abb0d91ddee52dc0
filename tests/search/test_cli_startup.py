"""Mistakes and Ctrl-C before a campaign starts are one line (issue 47.8): a scheduler address that is not one
(exit 2), Ctrl-C while the command imports (exit 130)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
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


@pytest.mark.slow
def test_ctrl_c_while_the_command_imports_is_one_line_and_exit_130(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    """Python's own start (site, runpy) comes before any code of hypersweep: the signal is sent once ``-X importtime``
    says the command has imported ``search`` (its first module), then at moments through the imports after it."""
    spec = tmp_path / "toy.toml"
    spec.write_text(toy_toml())
    interrupted = 0
    for delay in (0.0, 0.05, 0.1, 0.2, 0.3, 0.4):
        proc = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "search", "check", str(spec)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env,
        )
        assert proc.stderr is not None
        for line in proc.stderr:  # "import time: self | cumulative | module", each module as its import ends
            if line.rstrip().endswith("| search"):
                break
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        out, rest = proc.communicate(timeout=60)
        if out.strip():  # it had done its work when the signal came (one during Python's own exit is Python's)
            continue
        err = [line for line in rest.splitlines() if not line.startswith("import time:")]
        assert proc.returncode == EXIT_INTERRUPTED, (delay, rest[-2000:])
        assert err == ["hypersweep: interrupted"], (delay, err)
        interrupted += 1
    assert interrupted >= 3


INTERRUPTED_AFTER_MULTIPROCESSING = """
import multiprocessing  # makes __mp_main__ an alias of __main__, in this process too
from search.interrupts import _interrupted
_interrupted(2, None)  # what Ctrl-C runs while the command still imports
"""


def test_ctrl_c_once_multiprocessing_is_imported_is_still_one_line(subprocess_env: dict[str, str]) -> None:
    """The command must not take itself for a spawned child once ``multiprocessing`` is imported and exit 130 in
    silence: CI saw it at 0.2 s in the test above."""
    proc = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_AFTER_MULTIPROCESSING],
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (proc.returncode, proc.stderr.splitlines()) == (EXIT_INTERRUPTED, ["hypersweep: interrupted"])


CTRL_C_IN_A_STRING_EXEC = """
import sys
import search.cli as cli
cli._cmd_check = lambda args: exec("raise KeyboardInterrupt", {})  # as when Ctrl-C comes while a dataclass is built
sys.exit(cli.main(["check", "toy.toml"]))
"""


def test_ctrl_c_caught_inside_a_string_exec_still_exits_130_under_python_m(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    """CPython remembers a KeyboardInterrupt that left a string ``exec`` even when it is caught, and under ``-m``
    ends the process by SIGINT (-2) after ``main`` returned 130: CI saw it twice in the Ctrl-C test above."""
    (tmp_path / "ctrl_c_in_exec.py").write_text(CTRL_C_IN_A_STRING_EXEC)
    proc = subprocess.run(
        [sys.executable, "-m", "ctrl_c_in_exec"],
        cwd=tmp_path,
        env={**subprocess_env, "PYTHONPATH": f"{tmp_path}:{subprocess_env.get('PYTHONPATH', '')}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == EXIT_INTERRUPTED, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == ["hypersweep: interrupted"]
