"""A cluster that cannot run trials, or is lost, is one line on stderr: workers started by Dask's own CLI without
slot resources are named as such, with the flag that fixes it; a lost scheduler prints nothing from Dask."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from toy_specs import toy_toml

from spaces.errors import EXIT_CLUSTER
from tests.search.dask_processes import external_cluster, wait_for
from tests.spec_files import write_spec

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parents[1]  # tests/search: the shared trainers
ROOT = HERE.parents[1]

# No [cluster] table: the scheduler is joined (--scheduler).
SPEC = toy_toml("external", 12, 40, seed=3, trainer={"options": {"sleep": 0.2}}, cluster={"n_workers": None})


def _past_the_tcp_warning(stderr: str) -> list[str]:
    """stderr's lines after the one warning that joining a plain-TCP scheduler always prints."""
    lines = stderr.splitlines()
    assert lines and "is plain TCP: any local user can run code on its workers" in lines[0], stderr
    return lines[1:]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)])}


@pytest.mark.timeout(300)
def test_workers_without_slot_resources_are_named_with_the_flag_that_fixes_it(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "spec.toml", SPEC)
    with external_cluster(
        tmp_path / "cluster", n_workers=1, resources=None
    ) as cluster:  # `dask worker`, no --resources
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "search",
                "run",
                str(spec),
                "--runs-dir",
                str(tmp_path / "runs"),
                "--no-progress",
                "--scheduler",
                cluster.address,
            ],
            capture_output=True,
            text=True,
            env=_env(),
            timeout=180,
        )
    assert proc.returncode == EXIT_CLUSTER, proc.stderr
    lines = _past_the_tcp_warning(proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert "1 worker(s) declare no CPU slots" in lines[0] and "--resources CPU=n" in lines[0], lines[0]
    assert "hypersweep worker" in lines[0], lines[0]
    assert not (tmp_path / "runs" / "external").exists()  # nothing ran: nothing left


@pytest.mark.timeout(300)
def test_a_lost_scheduler_is_one_line_with_the_resume_command(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "spec.toml", SPEC)
    folder = tmp_path / "runs" / "external"
    with external_cluster(tmp_path / "cluster", n_workers=2) as cluster:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "search",
                "run",
                str(spec),
                "--runs-dir",
                str(tmp_path / "runs"),
                "--no-progress",
                "--scheduler",
                cluster.address,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
            start_new_session=True,
        )
        try:
            wait_for(lambda: len(list(folder.glob("trials/*/metrics.jsonl"))) >= 2, 120, "two trials to report")
            cluster.scheduler.send_signal(signal.SIGKILL)
            _out, err = proc.communicate(timeout=150)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
    assert proc.returncode == EXIT_CLUSTER, err
    lines = _past_the_tcp_warning(err)
    assert len(lines) == 1 and "lost the Dask scheduler" in lines[0], err  # no Dask ERROR traceback before it
    assert f"hypersweep resume {folder}" in lines[0], lines[0]
