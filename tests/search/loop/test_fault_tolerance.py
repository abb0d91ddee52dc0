"""Lose a worker or the controller, lose no result (real `dask scheduler` / `dask worker` processes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from dask_processes import external_cluster, wait_for

from tests.campaign_storage import load as load_campaign
from tests.spec_files import write_spec

pytestmark = pytest.mark.slow

SPEC = """
[study]
name = "ft"
direction = "maximize"
metric = "val_accuracy"
sampler = "random"
seed = 4
n_trials = {trials}
max_retries = 2

[trainer]
entry = "trainers.classifier:fit"
dataset = "synthetic"
epochs = {epochs}
options = {{ n_samples = {samples}, n_features = 40 }}

[space]
optimizer = "adam"
lr = {{ type = "float", low = 1e-3, high = 1e-2, log = true }}
batch_size = 64
hidden = 64
"""


def reports(folder: Path, number: int) -> list[dict]:
    path = folder / "trials" / str(number) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def load(folder: Path) -> optuna.Study:
    return load_campaign(folder, "ft")


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "search", *args, "--no-progress"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@pytest.mark.timeout(300)
def test_a_worker_killed_mid_trial_its_trial_resumes_elsewhere_from_its_checkpoint(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    spec = write_spec(tmp_path / "ft.toml", SPEC.format(trials=3, epochs=8, samples=12000))
    runs = tmp_path / "runs"
    folder = runs / "ft"
    # allowed-failures 0: a lost worker fails the task at once, and the controller's retry takes over.
    with external_cluster(tmp_path, 2, {"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"}) as cluster:
        proc = start(["run", str(spec), "--runs-dir", str(runs), "--scheduler", cluster.address], subprocess_env)
        try:
            wait_for(lambda: len(reports(folder, 0)) >= 3, 150, "trial 0 to report 3 epochs")
            victim = cluster.worker_names()[reports(folder, 0)[-1]["worker"]]
            cluster.kill_worker(victim)
            _out, err = proc.communicate(timeout=200)
            assert proc.returncode == 0, err
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)

    trials = load(folder).get_trials()
    assert len(trials) == 3
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    killed = trials[0]
    assert killed.user_attrs["retries"] == 1
    steps = [step for step, _m in killed.user_attrs["history"]]
    assert steps.count(1) == 1, f"epoch 1 ran again after the worker loss: {steps}"
    assert max(steps) == 8
    workers = {r["worker"] for r in reports(folder, 0)}
    assert len(workers) == 2  # it finished on the other worker


@pytest.mark.timeout(900)  # a hang guard for the bounded waits below
def test_controller_killed_then_resume_completes_the_budget_without_duplicates(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    spec = write_spec(tmp_path / "ft.toml", SPEC.format(trials=4, epochs=6, samples=24000))
    runs = tmp_path / "runs"
    folder = runs / "ft"
    with external_cluster(tmp_path, 2) as cluster:
        proc = start(["run", str(spec), "--runs-dir", str(runs), "--scheduler", cluster.address], subprocess_env)
        try:

            def complete() -> int:
                try:
                    return sum(t.state == optuna.trial.TrialState.COMPLETE for t in load(folder).get_trials())
                except Exception:  # noqa: BLE001 - the study may not exist yet
                    return 0

            wait_for(lambda: complete() >= 2, 200, "two complete trials")
            # A second controller on the same folder is refused while the first one holds it. The first is
            # paused (it keeps its lock) so that neither how long the refusal takes under load nor the first
            # one finishing meanwhile can change the outcome; the study must be exactly as the second found it.
            os.kill(proc.pid, signal.SIGSTOP)
            snapshot = [(t.number, t.state, t.value) for t in load(folder).get_trials()]
            second = subprocess.run(
                [sys.executable, "-m", "search", "resume", str(folder)],
                capture_output=True,
                text=True,
                env=subprocess_env,
                timeout=240,  # a hang guard only
            )
            assert second.returncode == 2 and "in use by another controller" in second.stderr
            assert f'"pid": {proc.pid}' in second.stderr
            assert [(t.number, t.state, t.value) for t in load(folder).get_trials()] == snapshot  # it ran nothing
            assert proc.poll() is None  # the first controller was not disturbed
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        before = {t.number: t.value for t in load(folder).get_trials() if t.state == optuna.trial.TrialState.COMPLETE}
        assert not (folder / "sampler.pkl").exists()  # resume seeds a new sampler; nothing is pickled

        resumed = subprocess.run(
            [sys.executable, "-m", "search", "resume", str(folder), "--scheduler", cluster.address, "--no-progress"],
            capture_output=True,
            text=True,
            env=subprocess_env,
            timeout=300,
        )
        assert resumed.returncode == 0, resumed.stderr

    trials = load(folder).get_trials()
    assert [t.number for t in trials] == list(range(4))
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    for number, value in before.items():
        assert trials[number].value == value  # earlier results unchanged


@pytest.mark.timeout(300)
def test_scheduler_lost_the_controller_exits_3_and_resume_continues_on_a_new_cluster(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    spec = write_spec(tmp_path / "ft.toml", SPEC.format(trials=4, epochs=4, samples=12000))
    runs = tmp_path / "runs"
    folder = runs / "ft"
    with external_cluster(tmp_path / "a", 2) as cluster:
        proc = start(["run", str(spec), "--runs-dir", str(runs), "--scheduler", cluster.address], subprocess_env)
        try:
            wait_for(lambda: len(reports(folder, 0)) >= 1, 150, "a first report")
            cluster.scheduler.send_signal(signal.SIGKILL)
            _out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 3, err
    assert "lost the Dask scheduler" in err and "hypersweep resume" in err
    with external_cluster(tmp_path / "b", 2) as cluster:
        resumed = subprocess.run(
            [sys.executable, "-m", "search", "resume", str(folder), "--scheduler", cluster.address, "--no-progress"],
            capture_output=True,
            text=True,
            env=subprocess_env,
            timeout=240,
        )
    assert resumed.returncode == 0, resumed.stderr
    trials = load(folder).get_trials()
    assert len(trials) == 4 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)


OOM_SPEC = """
[study]
name = "oom"
direction = "maximize"
metric = "score"
sampler = "random"
seed = 4
n_trials = 1
max_retries = 1

[trainer]
entry = "fault_trainers:eats_memory"
epochs = 1
options = {{ starts = "{starts}" }}

[space]
quality = {{ type = "float", low = 0.0, high = 1.0 }}
"""


@pytest.mark.timeout(300)
def test_a_trainer_that_exhausts_its_workers_memory_is_pruned_as_out_of_memory_and_never_retried(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    """An external cluster with Dask's default ``allowed-failures`` (3): Dask would run the task again on each
    restarted worker (the trainer was started 8 times once). The nanny's ``worker-restart-memory`` event tells the
    controller why the worker went: the trial ran out of memory, PRUNED with that reason, started once."""
    starts = tmp_path / "starts"
    spec = write_spec(tmp_path / "oom.toml", OOM_SPEC.format(starts=starts))
    env = {**subprocess_env, "DASK_LOGGING__DISTRIBUTED": "error"}
    file = tmp_path / "scheduler.json"
    scheduler = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "distributed.cli.dask_scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--no-dashboard",
            "--scheduler-file",
            str(file),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    worker = None
    try:
        wait_for(lambda: file.exists() and "address" in file.read_text(), 60, "the scheduler file")
        address = json.loads(file.read_text())["address"]
        worker = subprocess.Popen(  # with a nanny, which kills it at its memory limit and starts it again
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_worker",
                address,
                "--nthreads",
                "1",
                "--resources",
                "CPU=1",
                "--memory-limit",
                "600MB",
                "--nanny",
                "--no-dashboard",
                "--host",
                "127.0.0.1",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        runs = tmp_path / "runs"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "search",
                "run",
                str(spec),
                "--runs-dir",
                str(runs),
                "--scheduler",
                address,
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=240,
        )
    finally:
        for proc in (worker, scheduler):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
    # Killed by its nanny for memory (faster than any memory figure reaches the controller): the nanny's event
    # names the worker, so the trial is out of memory, not a lost worker to retry.
    assert done.returncode == 0, done.stderr
    assert len(starts.read_text().splitlines()) == 1  # never retried; Dask's own re-runs end at once (run_once)
    (trial,) = load_campaign(runs / "oom", "oom").get_trials()
    assert trial.state == optuna.trial.TrialState.PRUNED, trial.user_attrs
    assert trial.user_attrs["stop_reason"] == "out of memory" and not trial.user_attrs.get("retries")
    assert "killed by its nanny" in trial.user_attrs["out_of_memory"], trial.user_attrs
