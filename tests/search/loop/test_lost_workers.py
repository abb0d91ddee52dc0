"""Workers that vanish mid-run: the controller says what it waits for, then exits 3 resumable (real processes,
real SIGKILLs)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import optuna
import psutil
import pytest
from dask_processes import WORKER, external_cluster, wait_for
from distributed import Client
from toy_specs import toy_toml

from tests.campaign_storage import load as load_campaign

pytestmark = pytest.mark.slow

WAIT_LINE = "waiting for a worker with a free CPU slot"
TIMEOUT = 15.0  # [cluster] worker_timeout where a worker must be started again before it ends the run
LOST_TIMEOUT = 6.0  # [cluster] worker_timeout where every worker is gone for good: the exit 3 comes after it
JOINED_EPOCHS = 15  # 0.3 s each: trials 0 and 1 still run when the workers die at their second report
EMBEDDED_EPOCHS = 12  # 0.2 s each: trial 0 still runs when its worker dies at its second report


class Lines:
    """A process's stderr, each line with when it came (read on a thread of its own)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.seen: list[tuple[float, str]] = []
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.seen.append((time.monotonic(), line.rstrip("\n")))

    def first(self, text: str) -> float | None:
        return next((at for at, line in self.seen if text in line), None)

    def text(self) -> str:
        self._thread.join(timeout=10)
        return "\n".join(line for _at, line in self.seen)


@contextlib.contextmanager
def controller(args: list[str], env: dict[str, str]) -> Iterator[tuple[subprocess.Popen, Lines]]:
    """``python -m search ARGS`` and its stderr's lines; killed on the way out if it still runs."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "search", *args, "--no-progress"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        yield proc, Lines(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def assert_said_within_30s_then_exit_3(proc: subprocess.Popen, lines: Lines, died: float, folder: Path) -> None:
    """The controller whose workers all died at ``died`` said what it waits for within 30 s, then exited 3 with
    the resume command as its last line, no traceback."""
    err = lines.text()
    said = lines.first(WAIT_LINE)
    assert said is not None, err
    assert said - died <= 30, (said - died, err)
    assert proc.returncode == 3, err
    assert f"hypersweep resume {folder}" in err.splitlines()[-1], err
    assert "Traceback" not in err, err


def reported(folder: Path, number: int) -> int:
    path = folder / "trials" / str(number) / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def spec_text(n_trials: int, epochs: int = 30) -> str:
    return toy_toml(
        "lost",
        n_trials,
        epochs=epochs,
        trainer={"options": {"sleep": 0.3}},
        cluster={"worker_timeout": LOST_TIMEOUT, "n_workers": None},
    )


@pytest.mark.timeout(300)
def test_a_joined_cluster_whose_workers_all_die_is_said_within_30s_then_exit_3_and_resume_finishes(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    spec = tmp_path / "lost.toml"
    spec.write_text(spec_text(4, JOINED_EPOCHS))  # resume runs what is left of 4 trials on 2 workers: kept short
    runs = tmp_path / "runs"
    folder = runs / "lost"
    with external_cluster(tmp_path, 2) as cluster:
        args = ["run", str(spec), "--runs-dir", str(runs), "--scheduler", cluster.address]
        with controller(args, subprocess_env) as (proc, lines):
            wait_for(lambda: reported(folder, 0) >= 2 and reported(folder, 1) >= 2, 120, "two trials to report")
            for name in list(cluster.workers):
                cluster.kill_worker(name)  # SIGKILL; the scheduler stays
            died = time.monotonic()
            proc.wait(timeout=LOST_TIMEOUT + 90)
        assert_said_within_30s_then_exit_3(proc, lines, died, folder)
        assert WAIT_LINE in (folder / "campaign.log").read_text()
        # everything kept: the campaign resumes on two new workers (joined before it starts: worker_timeout is
        # short) and counts each trial once
        workers = [
            subprocess.Popen(
                [*WORKER, cluster.address, "--nthreads", "1", "--resources", "CPU=1", "--no-nanny", "--no-dashboard"],
                env={**subprocess_env, "DASK_LOGGING__DISTRIBUTED": "error"},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(2)
        ]
        try:
            wait_for(lambda: len(cluster.worker_names()) == 2, 90, "2 new workers")
            again = subprocess.run(
                [sys.executable, "-m", "search", "resume", str(folder), "--scheduler", cluster.address]
                + ["--no-progress"],
                env=subprocess_env,
                capture_output=True,
                text=True,
                timeout=240,
            )
        finally:
            for worker in workers:
                worker.kill()
                worker.wait(timeout=30)
    assert again.returncode == 0, again.stderr
    study = load_campaign(folder, "lost")
    trials = study.get_trials(deepcopy=False)
    assert [t.number for t in trials] == [0, 1, 2, 3]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    for trial in trials:
        steps = [json.loads(line)["step"] for line in (folder / "trials" / str(trial.number) / "metrics.jsonl").open()]
        assert sorted(set(steps)) == steps == list(range(1, JOINED_EPOCHS + 1))  # every report once


def worker_processes(controller: int) -> list[psutil.Process]:
    """The embedded cluster's worker processes: the controller's spawned children (sampling is inline here)."""
    found = []
    try:
        children = psutil.Process(controller).children()
    except psutil.NoSuchProcess:  # the controller has ended (the killer thread may outlive it by a moment)
        return []
    for child in children:
        try:
            if "spawn_main" in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.Error:
            continue
    return found


def embedded_run(tmp_path: Path, n_trials: int, timeout: float) -> tuple[list[str], Path]:
    """``run`` of a campaign of ``n_trials`` on one embedded worker (``timeout``: its ``worker_timeout``): its
    arguments and its folder."""
    spec = tmp_path / "lost.toml"
    spec.write_text(
        toy_toml(
            "lost",
            n_trials,
            epochs=EMBEDDED_EPOCHS,
            sampling="inline",
            trainer={"options": {"sleep": 0.2}},
            cluster={"worker_timeout": timeout, "n_workers": 1},
        )
    )
    return ["run", str(spec), "--runs-dir", str(tmp_path / "runs")], tmp_path / "runs" / "lost"


@pytest.mark.timeout(300)
def test_an_embedded_worker_that_its_nanny_does_not_start_again_is_started_anew_and_the_campaign_finishes(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    run, folder = embedded_run(tmp_path, 3, TIMEOUT)
    stopped: list[psutil.Process] = []
    with controller(run, subprocess_env) as (proc, lines):
        try:
            wait_for(lambda: reported(folder, 0) >= 2, 120, "trial 0 to report")
            first = worker_processes(proc.pid)
            assert len(first) == 1
            first[0].kill()  # SIGKILL; its nanny starts a new worker process ...
            gone = {first[0].pid}

            def stop_the_next() -> bool:
                stopped.extend(p for p in worker_processes(proc.pid) if p.pid not in gone)
                for p in stopped:
                    p.suspend()  # ... which never finishes starting: SIGSTOP, as a process hung in its imports
                return bool(stopped)

            wait_for(stop_the_next, 60, "the nanny's new worker process")
            proc.wait(timeout=180)
        finally:
            for p in stopped:
                with contextlib.suppress(psutil.Error):
                    p.kill()
    err = lines.text()
    assert proc.returncode == 0, err
    assert "not restarted by its nanny: starting it again" in (folder / "campaign.log").read_text()
    trials = load_campaign(folder, "lost").get_trials(deepcopy=False)
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 3


@pytest.mark.timeout(300)
def test_an_embedded_cluster_whose_workers_keep_dying_is_said_within_30s_then_exit_3_and_resume_finishes(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    run, folder = embedded_run(tmp_path, 3, LOST_TIMEOUT)
    killing = threading.Event()
    with controller(run, subprocess_env) as (proc, lines):

        def kill_every_worker() -> None:  # an OOM killer that takes every worker process as soon as it starts
            while killing.is_set():
                for p in worker_processes(proc.pid):
                    with contextlib.suppress(psutil.Error):
                        p.kill()
                time.sleep(0.02)

        killer = threading.Thread(target=kill_every_worker, daemon=True)
        try:
            wait_for(lambda: reported(folder, 0) >= 2, 120, "trial 0 to report")
            killing.set()
            killer.start()
            died = time.monotonic()
            proc.wait(timeout=LOST_TIMEOUT + 120)
        finally:
            killing.clear()
            killer.join(timeout=10) if killer.is_alive() else None
    assert_said_within_30s_then_exit_3(proc, lines, died, folder)
    again = subprocess.run(
        [sys.executable, "-m", "search", "resume", str(folder), "--no-progress"],
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert again.returncode == 0, again.stderr
    trials = load_campaign(folder, "lost").get_trials(deepcopy=False)
    assert [t.number for t in trials] == [0, 1, 2]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)


@pytest.mark.timeout(180)
def test_a_campaign_that_starts_on_a_cluster_with_no_worker_yet_says_so_and_runs_when_one_joins(
    tmp_path: Path,
) -> None:
    """Issue 47.7: no 'the cluster has no worker with a free slot' (exit 1) while workers are still on their way."""
    from distributed import LocalCluster

    from cluster import DaskExecutor
    from search.loop.campaign import Campaign
    from search.session.runner import load_study
    from search.spec.campaign_spec import parse_spec
    from search.store.folder import CampaignFolder

    text = toy_toml("late", 2, 1, sampling="inline", cluster={"worker_timeout": 20, "n_workers": None})
    spec = parse_spec(tomllib.loads(text), "late.toml", text)
    folder = CampaignFolder(tmp_path / "late")
    folder.create(text)
    study = load_study(spec, folder, create=True)
    said: list[str] = []
    with LocalCluster(
        n_workers=0, threads_per_worker=1, resources={"CPU": 1}, processes=True, dashboard_address=None
    ) as cluster:

        def notice(line: str) -> None:  # the line comes: now the worker starts
            said.append(line)
            cluster.scale(1)

        with Client(cluster) as client:
            Campaign(spec, folder, study, DaskExecutor(client, "test-late"), on_notice=notice).run()
    assert said and said[0].startswith(WAIT_LINE), said
    assert [t.state for t in study.get_trials()] == [optuna.trial.TrialState.COMPLETE] * 2
