"""A full disk stops a campaign in one line and loses nothing; a record cut by a crash is completed on resume.

The full disk is real: a 4 MB tmpfs in a private mount namespace (``unshare -m``, which needs root or
user namespaces; the test is skipped where neither is allowed). The crash is real: SIGKILL of the
controller, then the journal cut where a crash mid-write would cut it.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from dask_processes import wait_for
from private_mount import needs_private_mount, run_scenario
from toy_specs import toy_toml

from cluster.entrypoint import disk_error_of
from tests.campaign_storage import load as load_campaign
from tests.spec_files import write_spec

HERE = Path(__file__).resolve().parents[1]  # tests/search: the shared trainers


@pytest.mark.slow
@pytest.mark.timeout(600)
@needs_private_mount
def test_a_full_disk_stops_the_campaign_in_one_line_and_resume_reruns_what_it_cut(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    result = run_scenario("disk_full_scenario.py", tmp_path, subprocess_env)

    code, stderr = result["first"]
    assert code == 1, stderr
    assert "Traceback" not in stderr, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("hypersweep: ") and "No space left on device" in last, stderr
    assert "hypersweep resume" in last
    assert result["leftovers"] == []  # no temporary file stays behind
    code, stderr = result["second"]
    assert code == 0, stderr
    # the budget, exactly, and every trial complete: the one whose checkpoint failed ran again
    assert [(n, state, reports) for n, state, reports in result["trials"]] == [(n, "COMPLETE", 3) for n in range(4)]
    # each step once, though trial 1 re-sent the reports its checkpoint covers and reported step 2 again (another
    # epoch_seconds) after the checkpoint of step 2 failed
    assert result["history"] == result["lines"] == [[1, 2, 3]] * 4


SPEC = toy_toml(  # QMC: its parameters are set one entry each (random's trial is one entry: search.sampling.presample)
    "cut",
    4,
    2,
    seed=6,
    sampler="qmc",
    trainer={"options": {"sleep": 1.0}},
    space={"quality": {"type": "float", "low": 0.1, "high": 0.9}, "tag": {"type": "int", "low": 0, "high": 1000}},
)


def cut_after_first_parameter_of_last_trial(journal: Path) -> int:
    """Cut the journal as a crash mid-write would: just after the first parameter of the last trial asked."""
    lines = journal.read_text().splitlines(keepends=True)
    created = [i for i, line in enumerate(lines) if json.loads(line)["op_code"] == 4]
    last = created[-1]
    number = len(created) - 1
    first_param = next(i for i in range(last, len(lines)) if json.loads(lines[i])["op_code"] == 5)
    journal.write_text("".join(lines[: first_param + 1]))
    return number


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_trial_whose_record_was_cut_mid_parameters_is_completed_and_run_on_resume(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    spec = write_spec(tmp_path / "cut.toml", SPEC)
    folder = tmp_path / "runs" / "cut"
    proc = subprocess.Popen(
        [sys.executable, "-m", "search", "run", str(spec), "--runs-dir", str(tmp_path / "runs"), "--no-progress"],
        env=subprocess_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for(lambda: (folder / "trials" / "1" / "metrics.jsonl").exists(), 200, "trial 1 to report")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    cut = cut_after_first_parameter_of_last_trial(folder / "study.journal")
    partial = load_campaign(folder, "cut").trials[cut]
    assert partial.state == optuna.trial.TrialState.RUNNING and len(partial.params) == 1

    resumed = subprocess.run(
        [sys.executable, "-m", "search", "resume", str(folder), "--no-progress"],
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=240,
    )
    assert resumed.returncode == 0, resumed.stderr
    trials = load_campaign(folder, "cut").get_trials()
    assert [t.number for t in trials] == [0, 1, 2, 3]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    completed = trials[cut]
    assert set(completed.params) == {"quality", "tag"}
    assert completed.params[next(iter(partial.params))] == next(iter(partial.params.values()))  # kept what it had
    assert "record was cut short" in (folder / "campaign.log").read_text()


def test_a_disk_error_is_found_inside_the_error_a_library_wrapped_it_in() -> None:
    full = OSError(errno.ENOSPC, "No space left on device", "/x/checkpoint.pt")
    try:
        try:
            raise full
        except OSError:
            raise RuntimeError("PytorchStreamWriter failed writing file")  # noqa: B904 (chained as torch.save does)
    except RuntimeError as wrapped:
        assert disk_error_of(wrapped) == "ENOSPC"
    assert disk_error_of(FileNotFoundError(errno.ENOENT, "missing")) == ""  # the trial's own problem
    assert disk_error_of(ValueError("bad")) == ""
