"""Workers that vanish mid-run: the controller says what it waits for, then exits 3 resumable (real processes,
real SIGKILLs)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
from dask_processes import WORKER, external_cluster, wait_for
from toy_specs import toy_toml

from tests.campaign_storage import load as load_campaign

pytestmark = pytest.mark.slow

WAIT_LINE = "waiting for a worker with a free CPU slot"
TIMEOUT = 15.0  # [cluster] worker_timeout in these tests


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


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "search", *args, "--no-progress"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def reported(folder: Path, number: int) -> int:
    path = folder / "trials" / str(number) / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def spec_text(n_trials: int) -> str:
    return toy_toml(
        "lost",
        n_trials,
        epochs=30,
        trainer={"options": {"sleep": 0.3}},
        cluster={"worker_timeout": TIMEOUT, "n_workers": None},
    )


@pytest.mark.timeout(300)
def test_a_joined_cluster_whose_workers_all_die_is_said_within_30s_then_exit_3_and_resume_finishes(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    spec = tmp_path / "lost.toml"
    spec.write_text(spec_text(4))
    runs = tmp_path / "runs"
    folder = runs / "lost"
    with external_cluster(tmp_path, 2) as cluster:
        proc = start(["run", str(spec), "--runs-dir", str(runs), "--scheduler", cluster.address], subprocess_env)
        lines = Lines(proc)
        try:
            wait_for(lambda: reported(folder, 0) >= 2 and reported(folder, 1) >= 2, 120, "two trials to report")
            for name in list(cluster.workers):
                cluster.kill_worker(name)  # SIGKILL; the scheduler stays
            died = time.monotonic()
            proc.wait(timeout=TIMEOUT + 90)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        err = lines.text()
        said = lines.first(WAIT_LINE)
        assert said is not None, err
        assert said - died <= 30, (said - died, err)
        assert proc.returncode == 3, err
        assert f"hypersweep resume {folder}" in err.splitlines()[-1], err
        assert "Traceback" not in err, err
        assert WAIT_LINE in (folder / "campaign.log").read_text()
        # everything kept: the campaign resumes on a new worker and counts each trial once
        worker = subprocess.Popen(
            [*WORKER, cluster.address, "--nthreads", "1", "--resources", "CPU=1", "--no-nanny", "--no-dashboard"],
            env={**subprocess_env, "DASK_LOGGING__DISTRIBUTED": "error"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            again = subprocess.run(
                [sys.executable, "-m", "search", "resume", str(folder), "--scheduler", cluster.address]
                + ["--no-progress"],
                env=subprocess_env,
                capture_output=True,
                text=True,
                timeout=240,
            )
        finally:
            worker.kill()
            worker.wait(timeout=30)
    assert again.returncode == 0, again.stderr
    study = load_campaign(folder, "lost")
    trials = study.get_trials(deepcopy=False)
    assert [t.number for t in trials] == [0, 1, 2, 3]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    for trial in trials:
        steps = [json.loads(line)["step"] for line in (folder / "trials" / str(trial.number) / "metrics.jsonl").open()]
        assert sorted(set(steps)) == steps == list(range(1, 31))  # every report once
