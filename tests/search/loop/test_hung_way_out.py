"""What the controller waits for on its way out hangs, then Ctrl-C or SIGTERM: it still exits 130 within its way
out's bound (cluster.way_out), says what it stopped waiting for, leaves no process behind, and the campaign resumes.
Real processes, hung by SIGSTOP: every process the controller started (a stalled machine: its embedded workers and
its sampler's child), or a joined cluster's scheduler (a lost node that still holds its connections)."""

from __future__ import annotations

import contextlib
import inspect
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import psutil
import pytest
from dask_processes import external_cluster, wait_for
from toy_specs import toy_toml

from cluster.way_out import WAY_OUT_SECONDS
from search.store.failures import kept_line
from tests.campaign_storage import load as load_campaign

pytestmark = pytest.mark.slow

EPOCHS = 12  # 0.3 s each: trials still run when their processes stop at trial 0's second report
SLACK = 5.0  # seconds past the bound: a loaded machine's exit, and this test's own look


class Stderr:
    """A process's stderr, read on a thread of its own (a stopped child holding the pipe must not block the test)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen) -> None:
        assert proc.stderr is not None
        self.lines.extend(line.rstrip("\n") for line in proc.stderr)

    def text(self) -> str:
        self._thread.join(timeout=10)
        return "\n".join(self.lines)


@contextlib.contextmanager
def controller(args: list[str], env: dict[str, str]) -> Iterator[tuple[subprocess.Popen, Stderr]]:
    """``python -m search ARGS`` in a group of its own, as a terminal starts it (the target of a Ctrl-C); every
    process of that group killed on the way out of the block."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "search", *args, "--no-progress"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        yield proc, Stderr(proc)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def reported(folder: Path, number: int) -> int:
    path = folder / "trials" / str(number) / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def exit_within(proc: subprocess.Popen, stderr: Stderr, timeout: float) -> float:
    """Seconds the controller took to exit; past ``timeout``, fail with every thread's stack (``kill -USR1``)."""
    sent = time.monotonic()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGUSR1)
        time.sleep(2)
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"the controller did not exit within {timeout:g}s:\n{stderr.text()}") from None
    return time.monotonic() - sent


def assert_exited_130_within_the_bound(proc: subprocess.Popen, took: float, err: str, folder: Path) -> None:
    assert proc.returncode == 130, err
    assert took <= WAY_OUT_SECONDS + SLACK, (took, err)
    assert err.splitlines()[-1] == f"hypersweep: {kept_line(folder)}", err
    assert "Traceback" not in err, err
    wait_for(lambda: not group_alive(proc.pid), 30, "every process of the controller to exit")


def assert_resumes(folder: Path, env: dict[str, str], *args: str) -> None:
    """``resume`` finishes the campaign: its 4 trials, each once."""
    again = subprocess.run(
        [sys.executable, "-m", "search", "resume", str(folder), *args, "--no-progress"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert again.returncode == 0, again.stderr
    trials = load_campaign(folder, "hung").get_trials(deepcopy=False)
    assert [t.number for t in trials] == [0, 1, 2, 3]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)


def stop_children(pid: int) -> list[int]:
    """SIGSTOP every process ``pid`` started (the multiprocessing resource tracker aside): their pids."""
    stopped = []
    for child in psutil.Process(pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "resource_tracker" not in " ".join(child.cmdline()):
                child.send_signal(signal.SIGSTOP)
                stopped.append(child.pid)
    return stopped


@pytest.mark.timeout(420)
def test_ctrl_c_on_a_stalled_machine_exits_130_within_the_bound_saying_what_it_left_and_the_campaign_resumes(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    spec = tmp_path / "hung.toml"
    spec.write_text(
        toy_toml(
            "hung",
            4,
            epochs=EPOCHS,
            sampler="tpe",
            sampling="process",  # the sampler's child: its final state and its exit are waited for
            trainer={"options": {"sleep": 0.3}},
            cluster={"n_workers": 2},
        )
    )
    folder = tmp_path / "runs" / "hung"
    stopped: list[int] = []
    try:
        with controller(["run", str(spec), "--runs-dir", str(tmp_path / "runs")], subprocess_env) as (proc, stderr):
            wait_for(lambda: reported(folder, 0) >= 2, 120, "trial 0 to report twice")
            stopped = stop_children(proc.pid)  # the embedded workers and the sampler's child answer nothing now
            assert len(stopped) >= 3, stopped
            os.killpg(proc.pid, signal.SIGINT)  # what a terminal sends to its foreground group
            took = exit_within(proc, stderr, WAY_OUT_SECONDS + 60)
            err = stderr.text()
            assert_exited_130_within_the_bound(proc, took, err, folder)
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
    assert "hypersweep: the sampler's process did not send its final state within" in err, err
    assert_resumes(folder, subprocess_env)


@pytest.mark.timeout(420)
def test_sigterm_with_a_hung_scheduler_exits_130_within_the_bound_and_the_campaign_resumes(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    spec = tmp_path / "hung.toml"
    spec.write_text(
        toy_toml("hung", 4, epochs=EPOCHS, trainer={"options": {"sleep": 0.3}}, cluster={"n_workers": None})
    )
    runs = tmp_path / "runs"
    folder = runs / "hung"
    with external_cluster(tmp_path, 2) as cluster:
        scheduler = cluster.scheduler.pid
        args = ["run", str(spec), "--runs-dir", str(runs), "--scheduler", cluster.address]
        try:
            with controller(args, subprocess_env) as (proc, stderr):
                wait_for(lambda: reported(folder, 0) >= 2, 120, "trial 0 to report twice")
                os.kill(scheduler, signal.SIGSTOP)  # it answers nothing from now on; its sockets stay open
                os.kill(proc.pid, signal.SIGTERM)  # what `kill` or a batch system sends
                took = exit_within(proc, stderr, WAY_OUT_SECONDS + 60)
                assert_exited_130_within_the_bound(proc, took, stderr.text(), folder)
        finally:
            os.kill(scheduler, signal.SIGCONT)
        assert_resumes(folder, subprocess_env, "--scheduler", cluster.address)  # the scheduler answers again


@pytest.mark.timeout(420)
def test_a_scheduler_that_hangs_mid_run_is_found_lost_and_the_controller_exits_3_resumable(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    """No signal at all: a hung scheduler was waited for without end (the controller asked who it is, for ever)."""
    from cluster.connect import IDENTITY_TIMEOUT
    from cluster.executor import DaskExecutor

    lost_after = inspect.signature(DaskExecutor).parameters["lost_after"].default
    spec = tmp_path / "hung.toml"
    spec.write_text(
        toy_toml("hung", 4, epochs=EPOCHS, trainer={"options": {"sleep": 0.3}}, cluster={"n_workers": None})
    )
    runs = tmp_path / "runs"
    folder = runs / "hung"
    with external_cluster(tmp_path, 2) as cluster:
        scheduler = cluster.scheduler.pid
        args = ["run", str(spec), "--runs-dir", str(runs), "--scheduler", cluster.address]
        try:
            with controller(args, subprocess_env) as (proc, stderr):
                wait_for(lambda: reported(folder, 0) >= 2, 120, "trial 0 to report twice")
                os.kill(scheduler, signal.SIGSTOP)
                bound = lost_after + 2 * IDENTITY_TIMEOUT + WAY_OUT_SECONDS  # found lost, then its way out
                took = exit_within(proc, stderr, bound + 60)
                err = stderr.text()
                assert proc.returncode == 3, err
                assert took <= bound + SLACK, (took, err)
                last = err.splitlines()[-1]
                assert f"the Dask scheduler at {cluster.address} has not answered for" in last, err
                assert f"hypersweep resume {folder}" in last, err
                assert "Traceback" not in err, err
                wait_for(lambda: not group_alive(proc.pid), 30, "every process of the controller to exit")
        finally:
            os.kill(scheduler, signal.SIGCONT)
        assert_resumes(folder, subprocess_env, "--scheduler", cluster.address)
