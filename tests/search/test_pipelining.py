"""Sampling off the dispatch path and batched trials, on a real LocalCluster with real storage."""

from __future__ import annotations

import time
import tomllib
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from cluster import ClusterOptions, DaskExecutor, open_cluster
from search.campaign import NEVER_STARTED, Campaign
from search.folder import CampaignFolder
from search.runner import load_study
from search.spec import SpecError, parse_spec

pytestmark = pytest.mark.slow

SPEC = """
[study]
name = "pipe"
direction = "maximize"
metric = "score"
sampler = "random"
seed = 5
n_trials = {n_trials}
{study_extra}

[trainer]
entry = "toy_trainers:fit"
epochs = 1
options = {{ sleep = {sleep}{options} }}

[space]
quality = {{ type = "categorical", choices = [{choices}] }}
"""


def make(tmp_path: Path, n_trials: int = 3, sleep: float = 0.0, study_extra: str = "", options: str = "",
         choices: str = "0.25, 0.5, 0.75") -> tuple[Any, CampaignFolder, optuna.Study]:  # fmt: skip
    text = SPEC.format(n_trials=n_trials, sleep=sleep, study_extra=study_extra, options=options, choices=choices)
    spec = parse_spec(tomllib.loads(text), "pipe.toml", text)
    folder = CampaignFolder(tmp_path / "pipe")
    folder.create(text)
    return spec, folder, load_study(spec, folder, create=True)


class WaitsForTrialZero(optuna.samplers.RandomSampler):
    """Samples trial 1 only once trial 0 has been told: impossible if sampling blocked the loop."""

    def sample_independent(self, study, trial, param_name, param_distribution):  # type: ignore[no-untyped-def]
        if trial.number == 1:
            deadline = time.monotonic() + 30
            while study._storage.get_trial(study._storage.get_trial_id_from_study_id_trial_number(
                    study._study_id, 0)).state != TrialState.COMPLETE:  # fmt: skip
                if time.monotonic() > deadline:
                    raise TimeoutError("trial 0 was never told while trial 1 was being sampled")
                time.sleep(0.01)
        return super().sample_independent(study, trial, param_name, param_distribution)


@pytest.mark.timeout(120)
def test_a_trial_finishing_while_the_sampler_works_is_told_without_waiting_for_it(tmp_path: Path) -> None:
    spec, folder, study = make(tmp_path, n_trials=3)
    study.sampler = WaitsForTrialZero(seed=1)
    with open_cluster(ClusterOptions(n_workers=1)) as client:
        Campaign(spec, folder, study, DaskExecutor(client, "test-pipe-ask")).run()
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3
    assert trials[1].user_attrs["sampler_saw"] >= 1  # sampled after trial 0 was told


@pytest.mark.timeout(120)
def test_batched_trials_each_report_fail_or_complete_on_their_own(tmp_path: Path) -> None:
    spec, folder, study = make(tmp_path, n_trials=7, study_extra="batch_trials = 3", choices="-1.0, 0.5, 0.75")
    with open_cluster(ClusterOptions(n_workers=1)) as client:
        # sampling inline makes the batches deterministic: 3, 3 and the last 1
        Campaign(spec, folder, study, DaskExecutor(client, "test-pipe-batch"), threaded_sampling=False).run()
    trials = study.get_trials()
    assert [t.user_attrs.get("batch", 1) for t in trials] == [3, 3, 3, 3, 3, 3, 1]
    for t in trials:
        failing = t.params["quality"] < 0
        assert t.state == (TrialState.FAIL if failing else TrialState.COMPLETE)
        assert ("negative" in t.user_attrs.get("fail_reason", "")) == failing
        assert (folder.trial(t.number) / "metrics.jsonl").exists() != failing  # reports of its own
    first_batch = sorted(trials[:3], key=lambda t: t.user_attrs["started"])
    for before, after in zip(first_batch, first_batch[1:]):  # one after another in one task
        assert before.user_attrs["finished"] <= after.user_attrs["started"]
        assert before.user_attrs["worker"] == after.user_attrs["worker"]


@pytest.mark.timeout(180)
def test_a_batch_whose_worker_dies_is_retried_trial_by_trial(tmp_path: Path) -> None:
    marker = tmp_path / "died"
    spec, folder, study = make(tmp_path, n_trials=3, study_extra="batch_trials = 3",
                               options=f', die_once = "{marker}"')  # fmt: skip
    with open_cluster(ClusterOptions(n_workers=1)) as client:
        Campaign(spec, folder, study, DaskExecutor(client, "test-pipe-lost"), threaded_sampling=False).run()
    trials = study.get_trials()
    assert marker.exists()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3
    assert [t.user_attrs.get("retries") for t in trials] == [1, 1, 1]


class SlowSampler(optuna.samplers.RandomSampler):
    def sample_independent(self, study, trial, param_name, param_distribution):  # type: ignore[no-untyped-def]
        time.sleep(1.5)
        return super().sample_independent(study, trial, param_name, param_distribution)


@pytest.mark.timeout(120)
def test_a_trial_asked_after_the_time_budget_ends_pruned_not_running(tmp_path: Path) -> None:
    spec, folder, study = make(tmp_path, n_trials=5, study_extra="time_budget = 0.5")
    study.sampler = SlowSampler(seed=2)
    with open_cluster(ClusterOptions(n_workers=1)) as client:
        Campaign(spec, folder, study, DaskExecutor(client, "test-pipe-budget")).run()
    trials = study.get_trials()
    assert trials and all(t.state.is_finished() for t in trials)
    never = [t for t in trials if t.user_attrs.get("stop_reason") == NEVER_STARTED]
    assert never and all(t.state == TrialState.PRUNED for t in never)


@pytest.mark.parametrize("value", ["0", "-1", '"many"', "true"])
def test_batch_trials_must_be_auto_or_a_positive_integer(tmp_path: Path, value: str) -> None:
    text = SPEC.format(n_trials=2, sleep=0, study_extra=f"batch_trials = {value}", options="", choices="0.5")
    with pytest.raises(SpecError, match=r"batch_trials.*\"auto\" or an integer >= 1"):
        parse_spec(tomllib.loads(text), "pipe.toml", text)
