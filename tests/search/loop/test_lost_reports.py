"""No report is lost when a trial's run dies between a report and the controller receiving it.

The built-in trainer's checkpoint carries the reports it covers; a re-run (a retry, or after
``resume``) sends them again and the controller keeps each (step, metrics) once. Real Dask
worker processes, the real classifier trainer, the real journal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import torch
from dask_processes import external_cluster, wait_for

from search.session.runner import RunOptions, run_campaign
from search.spec.campaign_spec import load_spec
from tests.campaign_storage import load as load_campaign
from tests.spec_files import write_spec

pytestmark = pytest.mark.slow

EPOCHS = 5

SPEC = """
[study]
name = "lost"
direction = "maximize"
metric = "val_accuracy"
sampler = "random"
seed = 5
n_trials = {trials}
max_retries = 2

[trainer]
entry = "{entry}"
dataset = "synthetic"
epochs = {epochs}
options = {{ n_samples = {samples}, n_features = 20{extra} }}

[space]
optimizer = "adam"
lr = {{ type = "float", low = 1e-3, high = 1e-2, log = true }}
batch_size = 64
hidden = 16

[cluster]
n_workers = 1
"""


def steps_in_file(folder: Path, number: int) -> list[int]:
    path = folder / "trials" / str(number) / "metrics.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []


def assert_every_report_once(trial: optuna.trial.FrozenTrial, folder: Path) -> None:
    expected = list(range(1, EPOCHS + 1))
    assert trial.state == optuna.trial.TrialState.COMPLETE
    assert steps_in_file(folder, trial.number) == expected
    assert [step for step, _m in trial.user_attrs["history"]] == expected
    assert len(trial.intermediate_values) == EPOCHS  # keyed by epoch, one per report


@pytest.mark.timeout(240)
def test_a_report_lost_with_its_worker_is_sent_again_by_the_retry(tmp_path: Path) -> None:
    marker = tmp_path / "lost-once"
    extra = f', lose_report = [2, "{marker}"]'
    text = SPEC.format(trials=1, entry="toy_trainers:lossy_classifier", epochs=EPOCHS, samples=600, extra=extra)
    spec = load_spec(write_spec(tmp_path / "lost.toml", text))
    folder = run_campaign(spec, RunOptions(runs_dir=tmp_path / "runs", progress=False))

    assert marker.exists()  # the first run did die after its checkpoint, with step 2 never sent
    (trial,) = load_campaign(folder.root, "lost").get_trials()
    assert_every_report_once(trial, folder.root)


def checkpoint_epoch(folder: Path, number: int) -> int:
    path = folder / "trials" / str(number) / "checkpoint.pt"
    try:
        return int(torch.load(path, map_location="cpu", weights_only=True)["epoch"])
    except (FileNotFoundError, EOFError, RuntimeError):
        return 0


@pytest.mark.timeout(420)
def test_reports_made_while_the_controller_was_dead_reach_the_study_on_resume(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    text = SPEC.format(trials=1, entry="trainers.classifier:fit", epochs=EPOCHS, samples=20000, extra="")
    spec = write_spec(tmp_path / "lost.toml", text)
    runs = tmp_path / "runs"
    folder = runs / "lost"
    with external_cluster(tmp_path, 1) as cluster:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "search",
                "run",
                str(spec),
                "--runs-dir",
                str(runs),
                "--scheduler",
                cluster.address,
                "--no-progress",
            ],
            env=subprocess_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            wait_for(lambda: len(steps_in_file(folder, 0)) >= 1, 200, "trial 0's first report")
            os.killpg(proc.pid, signal.SIGKILL)  # kill -9: the trial goes on at the worker, its reports unheard
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        wait_for(lambda: checkpoint_epoch(folder, 0) == EPOCHS, 240, "the orphaned run to checkpoint its last epoch")
        heard = steps_in_file(folder, 0)
        assert heard[-1] < EPOCHS, f"the controller heard every report before it died: {heard}"

        resumed = subprocess.run(
            [sys.executable, "-m", "search", "resume", str(folder), "--scheduler", cluster.address, "--no-progress"],
            capture_output=True,
            text=True,
            env=subprocess_env,
            timeout=300,
        )
        assert resumed.returncode == 0, resumed.stderr

    (trial,) = load_campaign(folder, "lost").get_trials()
    assert_every_report_once(trial, folder)


def test_a_torn_metrics_line_costs_only_itself(tmp_path: Path) -> None:
    from search.store.records import append_metrics_line, read_metrics_lines

    path = tmp_path / "metrics.jsonl"
    append_metrics_line(path, 1, {"loss": 0.5}, 10.0, "w")
    with open(path, "a") as fh:
        fh.write('{"step": 2, "time": 11.0, "lo')  # a crash mid-write
    append_metrics_line(path, 3, {"loss": float("nan")}, 12.0)
    steps = [(step, at) for step, _m, at in read_metrics_lines(path)]
    assert steps == [(1, 10.0), (3, 12.0)]
    assert read_metrics_lines(tmp_path / "none.jsonl") == []


def run_killed(tmp_path: Path, retries: int, epochs: int, marker: str) -> tuple[optuna.trial.FrozenTrial, Path]:
    """One trial of ``fault_trainers:killed_after_report``: its worker SIGKILLed after report(4), before checkpoint 4."""
    extra = ", kill_after = 4" + (f', kill_marker = "{marker}"' if marker else "")
    text = SPEC.format(trials=1, entry="fault_trainers:killed_after_report", epochs=epochs, samples=600, extra=extra)
    spec = load_spec(write_spec(tmp_path / "killed.toml", text.replace("max_retries = 2", f"max_retries = {retries}")))
    folder = run_campaign(spec, RunOptions(runs_dir=tmp_path / "runs", progress=False))
    (trial,) = load_campaign(folder.root, "lost").get_trials()
    return trial, folder.root


@pytest.mark.timeout(240)
def test_a_worker_killed_after_a_report_and_before_its_checkpoint_leaves_that_step_once(tmp_path: Path) -> None:
    marker = tmp_path / "killed-once"
    trial, folder = run_killed(tmp_path, retries=2, epochs=6, marker=str(marker))

    assert marker.exists()  # the first run was SIGKILLed after report(4) reached the controller, before checkpoint 4
    assert len((folder / "trials" / "0" / "starts").read_text().splitlines()) == 2  # it ran again from checkpoint 3
    assert trial.state == optuna.trial.TrialState.COMPLETE
    assert steps_in_file(folder, 0) == [1, 2, 3, 4, 5, 6]  # step 4 twice before: the copies' epoch_seconds differ
    assert [step for step, _m in trial.user_attrs["history"]] == [1, 2, 3, 4, 5, 6]
    assert len(trial.intermediate_values) == 6


@pytest.mark.timeout(240)
def test_a_trial_killed_on_every_attempt_fails_with_each_step_once_after_one_plus_max_retries_runs(
    tmp_path: Path,
) -> None:
    trial, folder = run_killed(tmp_path, retries=1, epochs=6, marker="")

    assert len((folder / "trials" / "0" / "starts").read_text().splitlines()) == 2  # 1 + max_retries, no more
    assert trial.state == optuna.trial.TrialState.FAIL
    assert trial.user_attrs["retries"] == 1 and "retries spent" in trial.user_attrs["fail_reason"]
    assert steps_in_file(folder, 0) == [1, 2, 3, 4]  # [1, 2, 3, 4, 4] before
    assert [step for step, _m in trial.user_attrs["history"]] == [1, 2, 3, 4]
    assert len(trial.intermediate_values) == 4
