"""A journal torn inside its last commit, right after a trial's creation, resumes: the trial keeps the parameters
it ran with (its checkpoint still fits), whatever the sampler.

A real campaign (``python -m search run``, TPE in its sampler child, random, or QMC, the real classifier with its
checkpoints) is SIGKILLed once its last trial has reported; its journal is then cut as a crash mid-write
would cut it: the last ``"op_code":4`` line (a trial's creation) plus the next line, minus 40 bytes. Then
``resume`` must exit 0 and plain Optuna must find the budget exact and every step once everywhere.
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
from dask_processes import wait_for

from bench.chaos import tear_journal
from search.store.folder import CampaignFolder
from search.store.trial_params import read_params
from tests.campaign_storage import load as load_campaign
from tests.spec_files import write_spec

pytestmark = pytest.mark.slow

TRIALS, EPOCHS = 4, 3

SPEC = """
[study]
name = "torn"
direction = "maximize"
metric = "val_accuracy"
sampler = "{sampler}"
seed = 3
n_trials = {trials}

[trainer]
entry = "trainers.classifier:fit"
dataset = "synthetic"
epochs = {epochs}
options = {{ n_samples = 3000, n_features = 20 }}

[space]
optimizer = {{ type = "categorical", choices = ["adam", "sgd"] }}
lr = {{ type = "float", low = 1e-3, high = 1e-1, log = true }}
batch_size = 64
hidden = 16

[cluster]
n_workers = 2
"""


def steps(folder: Path, number: int) -> list[int]:
    path = folder / "trials" / str(number) / "metrics.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("sampler", ["tpe", "random", "qmc"])
@pytest.mark.timeout(420)
def test_a_journal_torn_right_after_a_trial_creation_resumes_with_the_trials_own_parameters(
    tmp_path: Path, subprocess_env: dict[str, str], sampler: str
) -> None:
    spec = write_spec(tmp_path / "torn.toml", SPEC.format(sampler=sampler, trials=TRIALS, epochs=EPOCHS))
    runs = tmp_path / "runs"
    folder = runs / "torn"
    proc = subprocess.Popen(
        [sys.executable, "-m", "search", "run", str(spec), "--runs-dir", str(runs), "--no-progress"],
        env=subprocess_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for(lambda: len(steps(folder, TRIALS - 1)) >= 1, 300, "the last trial to report")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    torn = tear_journal(folder)  # the cut: the last "op_code":4 line, plus the next one minus 40 bytes
    assert torn["torn"] and torn["torn_trial"] == TRIALS - 1 and torn["cut_bytes"] > 40, torn
    cut = load_campaign(folder, "torn").get_trials()[-1]
    assert cut.number == TRIALS - 1 and cut.state == optuna.trial.TrialState.RUNNING
    if sampler == "qmc":  # parameters set one entry each: the tear took (some of) them
        assert set(cut.params) < {"optimizer", "lr"}, cut.params
    else:  # random's and the sampler child's trials are created with their parameters (search.sampling.presample)
        assert set(cut.params) == {"optimizer", "lr"}, cut.params
    ran_with = read_params(CampaignFolder(folder), cut.number)  # the parameters log's line for it
    assert ran_with is not None and set(ran_with) == {"optimizer", "lr"}

    resumed = subprocess.run(
        [sys.executable, "-m", "search", "resume", str(folder), "--no-progress"],
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr  # TPE: "parameter 'optimizer' was not sampled by ..." before

    trials = load_campaign(folder, "torn").get_trials()
    assert [t.number for t in trials] == list(range(TRIALS))  # the budget, exactly
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials), {
        t.number: t.user_attrs.get("fail_reason") for t in trials
    }  # random: "checkpoint.pt: written by another trial" before
    assert trials[cut.number].params == ran_with  # the parameters its checkpoint was made with
    for t in trials:
        expected = list(range(1, EPOCHS + 1))
        assert steps(folder, t.number) == expected
        assert [step for step, _m in t.user_attrs["history"]] == expected
        assert len(t.intermediate_values) == EPOCHS
    assert ("record was cut short" in (folder / "campaign.log").read_text()) == (sampler == "qmc")
