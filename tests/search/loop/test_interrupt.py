"""Ctrl-C during a campaign: no process left behind, and a storage `hypersweep status` reads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from toy_specs import toy_toml

from tests.campaign_storage import load
from tests.spec_files import write_spec

pytestmark = pytest.mark.slow

SPEC = toy_toml("slow", n_trials=20, epochs=50, seed=5, trainer={"options": {"sleep": 0.2}}, cluster={"n_workers": 2})


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def start_run(spec: Path, runs: Path, env: dict[str, str]) -> subprocess.Popen:
    """``hypersweep run SPEC`` as a terminal starts it: a process group of its own (the target of a Ctrl-C)."""
    return subprocess.Popen(
        [sys.executable, "-m", "search", "run", str(spec), "--runs-dir", str(runs), "--no-progress"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # A terminal starts it with Ctrl-C at its default; an ignored SIGINT would be inherited from this test
        # process (an earlier test on the same xdist worker may leave it ignored; see the session-14 note).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def exit_or_stacks(proc: subprocess.Popen, timeout: float) -> str:
    """The controller's stderr once it exits; if it has not within ``timeout`` s, fail with every thread's stack
    (``kill -USR1``, see search.cli) and what it printed, so a hang says where it waits."""
    try:
        return proc.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGUSR1)
        time.sleep(2)
        os.killpg(proc.pid, signal.SIGKILL)
        _out, err = proc.communicate(timeout=30)
        raise AssertionError(
            f"the controller did not exit within {timeout:g}s; its stacks and stderr:\n{err}"
        ) from None


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("how", ["ctrl-c to the group", "sigterm to the controller"])
def test_ctrl_c_leaves_no_process_and_a_readable_storage(
    tmp_path: Path, subprocess_env: dict[str, str], how: str
) -> None:
    spec = write_spec(tmp_path / "slow.toml", SPEC)
    runs = tmp_path / "runs"
    proc = start_run(spec, runs, subprocess_env)
    pgid = proc.pid
    try:
        folder = runs / "slow"
        wait_for(lambda: len(list(folder.glob("trials/*/metrics.jsonl"))) >= 2, 120, "two trials to report")
        if how == "ctrl-c to the group":
            os.killpg(pgid, signal.SIGINT)  # what a terminal sends to the whole foreground group
        else:
            os.kill(proc.pid, signal.SIGTERM)  # what `kill` or a batch system sends
        err = exit_or_stacks(proc, 90)
        assert proc.returncode == 130, err
        # One line, with the command that continues: nothing from Dask's workers or scheduler (no tracebacks).
        assert err.splitlines() == [
            f"hypersweep: interrupted; running trials are kept: continue with 'hypersweep resume {folder}'"
        ], err
        wait_for(lambda: not group_alive(pgid), 30, "every process of the campaign to exit")
    finally:
        if group_alive(pgid):
            os.killpg(pgid, signal.SIGKILL)
            proc.wait(timeout=30)

    status = subprocess.run(
        [sys.executable, "-m", "search", "status", str(folder)],
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    assert "controller not running" in status.stdout
    assert "interrupted" in status.stdout
    study = load(folder, "slow")
    running = [t for t in study.get_trials() if t.state == optuna.trial.TrialState.RUNNING]
    assert running and all(t.user_attrs.get("interrupted") for t in running)


@pytest.mark.timeout(300)
def test_resume_after_ctrl_c_finishes_the_budget_without_duplicates(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    body = SPEC.replace("n_trials = 20", "n_trials = 4").replace("epochs = 50", "epochs = 6")
    spec = write_spec(tmp_path / "slow.toml", body)
    runs = tmp_path / "runs"
    folder = runs / "slow"
    proc = start_run(spec, runs, subprocess_env)
    try:
        wait_for(lambda: len(list(folder.glob("trials/*/metrics.jsonl"))) >= 1, 120, "a trial to report")
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=90)
        assert proc.returncode == 130
    finally:
        if group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
    study = load(folder, "slow")
    before = {t.number: t.params for t in study.get_trials()}
    interrupted = [t.number for t in study.get_trials() if t.state == optuna.trial.TrialState.RUNNING]
    assert interrupted

    resumed = subprocess.run(
        [sys.executable, "-m", "search", "resume", str(folder), "--no-progress"],
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=240,
    )
    assert resumed.returncode == 0, resumed.stderr
    trials = load(folder, "slow").get_trials()
    assert len(trials) == 4
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    for number, params in before.items():
        assert trials[number].params == params  # same numbers, same parameters
    for number in interrupted:
        history_steps = [step for step, _m in trials[number].user_attrs["history"]]
        assert history_steps == sorted(set(history_steps))


@pytest.mark.timeout(240)
def test_kill_usr1_prints_every_thread_of_a_running_controller_and_it_runs_on(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    spec = write_spec(tmp_path / "slow.toml", SPEC)
    folder = tmp_path / "runs" / "slow"
    proc = start_run(spec, tmp_path / "runs", subprocess_env)
    try:
        wait_for(lambda: len(list(folder.glob("trials/*/metrics.jsonl"))) >= 1, 120, "a trial to report")
        os.kill(proc.pid, signal.SIGUSR1)
        time.sleep(1)
        assert proc.poll() is None  # the dump does not stop it
        os.killpg(proc.pid, signal.SIGINT)
        err = exit_or_stacks(proc, 90)
    finally:
        if group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert proc.returncode == 130, err
    assert "Current thread" in err and "search/cli.py" in err, err  # the main thread's stack, down to main()
