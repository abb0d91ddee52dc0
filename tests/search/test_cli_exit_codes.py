"""Exit codes: every HypersweepError is one line and its exit_code; a campaign whose every trial failed exits 4;
commands that only read a campaign folder work without its trainer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from toy_specs import toy_toml

from search.cli import _exit_code, failure_summary
from search.spec.campaign_spec import SpecError
from spaces.errors import EXIT_ALL_FAILED, EXIT_CLUSTER, EXIT_INPUT, HypersweepError, SpaceError
from tests.spec_files import write_spec

ROOT = Path(__file__).resolve().parents[2]

# Every trial fails: the toy trainer refuses a negative quality.
ALL_FAIL = toy_toml("doomed", n_trials=3, seed=5, space={"quality": {"type": "float", "low": -2.0, "high": -1.0}})


def hypersweep(args: list[str], env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "search", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def one_line(stderr: str) -> str:
    """The one error line (other processes on this machine may make Dask warn about a busy dashboard port)."""
    lines = [line for line in stderr.splitlines() if line.startswith("hypersweep:")]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr, stderr
    return lines[0]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_all_failed_exits_4_and_a_finished_folder_reads_without_its_trainer(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    spec = write_spec(tmp_path / "doomed.toml", ALL_FAIL)
    runs = tmp_path / "runs"
    proc = hypersweep(["run", str(spec), "--runs-dir", str(runs), "--no-progress"], subprocess_env)
    assert proc.returncode == EXIT_ALL_FAILED, proc.stderr
    line = one_line(proc.stderr)
    assert line.startswith("hypersweep: all 3 trials failed: 3x ValueError: quality -1."), line
    assert "fails on purpose" in line and "error.log" in line, line
    assert "trials: 0 COMPLETE, 0 PRUNED, 3 FAIL" in proc.stdout, proc.stdout

    # The trainer's module is gone: reading the campaign still works, running or checking it does not.
    folder = runs / "doomed"
    bare = {**subprocess_env, "PYTHONPATH": str(ROOT)}
    status = hypersweep(["status", str(folder)], bare, timeout=120)
    assert status.returncode == 0, status.stderr
    assert "3 fail" in status.stdout, status.stdout
    report = hypersweep(["report", str(folder)], bare, timeout=180)
    assert report.returncode == 0, report.stderr
    assert (folder / "report" / "index.html").exists()
    check = hypersweep(["check", str(folder / "spec.toml")], bare, timeout=120)
    assert check.returncode == EXIT_INPUT, check.stderr
    line = one_line(check.stderr)
    assert "trainer.entry" in line and "cannot import module 'toy_trainers'" in line, line
    reproduce = hypersweep(["reproduce", str(folder), "0"], bare, timeout=120)
    assert reproduce.returncode == EXIT_INPUT  # a failed trial cannot be reproduced; said before any import
    assert "only a finished trial" in one_line(reproduce.stderr)


def _study(states_and_reasons: list[tuple[TrialState, str]]) -> optuna.Study:
    """Trials as the controller records them: a failure that raised carries its class (``error_type``)."""
    study = optuna.create_study()
    for state, reason in states_and_reasons:
        trial = study.ask()
        if reason:
            trial.set_user_attr("fail_reason", reason)
        head = reason.split(":", 1)[0]
        if head.endswith("Error"):
            trial.set_user_attr("error_type", head)
        study.tell(trial, 1.0 if state == TrialState.COMPLETE else None, state=state)
    return study


def test_failure_summary_groups_by_error_kind_and_is_empty_unless_every_trial_failed() -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = _study(
        [
            (TrialState.FAIL, "ValueError: quality -1.5 is negative"),
            (TrialState.FAIL, "ValueError: quality -1.2 is negative"),
            (TrialState.FAIL, "metric 'score' is nan"),
            (TrialState.FAIL, "RuntimeError: CUDA out of memory\n  more"),
            (TrialState.FAIL, "worker lost (killed); retries spent"),
            (TrialState.FAIL, ""),
        ]
    )
    text = failure_summary(study)
    assert text.startswith("all 6 trials failed: 2x ValueError: quality -1.5 is negative; 1x "), text
    assert text.endswith("2x other reasons") and "\n" not in text, text
    assert failure_summary(_study([(TrialState.FAIL, "x"), (TrialState.COMPLETE, "")])) == ""
    assert failure_summary(_study([(TrialState.FAIL, "x"), (TrialState.PRUNED, "")])) == ""
    assert failure_summary(_study([])) == ""
    assert failure_summary(_study([(TrialState.FAIL, "x" * 500)])) == f"all 1 trial failed: 1x {'x' * 117}..."


def test_every_hypersweep_error_maps_to_its_exit_code() -> None:
    from cluster import ClusterError

    class Custom(HypersweepError):
        exit_code = 7

    assert _exit_code(Custom("boom")) == 7
    assert _exit_code(HypersweepError("boom")) == 1
    assert _exit_code(SpecError("s.toml", "study.seed", "must be an integer")) == EXIT_INPUT
    assert _exit_code(SpaceError("lr.low", "must be > 0")) == EXIT_INPUT
    assert _exit_code(ClusterError("no scheduler")) == EXIT_CLUSTER
    assert _exit_code(ValueError("--workers=0")) is None  # a plain ValueError is a bug (issue 25): its traceback
    assert _exit_code(KeyError("bug")) is None  # not meant for the user: its traceback shows
    assert isinstance(SpecError("s", "k", "p"), ValueError)  # callers catching ValueError still do


@pytest.mark.slow
def test_a_hypersweep_error_from_a_command_is_one_line_and_its_code(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = hypersweep(["status", str(tmp_path / "nowhere")], env, timeout=120)
    assert proc.returncode == EXIT_INPUT
    assert "holds no campaign" in one_line(proc.stderr)
