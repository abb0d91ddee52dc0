"""Deterministic campaigns: the trial table does not depend on timing or on the worker count."""

from __future__ import annotations

import tomllib
from pathlib import Path

import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState

from cluster.simulated import SimulatedExecutor, TrialPlan
from search.loop.campaign import Campaign
from search.session.runner import RunOptions, load_study, run_campaign
from search.spec.campaign_spec import SpecError, parse_spec
from search.store.folder import CampaignFolder
from tests.campaign_storage import load

SPEC = """
[study]
name = "det"
direction = "maximize"
metric = "val_accuracy"
sampler = "tpe"
seed = 21
n_trials = 8
deterministic = true
parallelism = 2

[sampler]
n_startup_trials = 4  # so that half the trials are TPE's own picks

[trainer]
entry = "trainers.classifier:fit"
dataset = "digits"
epochs = 1

[space]
optimizer = "adam"
lr = { type = "float", low = 1e-4, high = 3e-2, log = true }
hidden = { type = "int", low = 16, high = 128, step = 16 }
batch_size = { type = "batch_size", low = 16, high = 64 }
"""

TIMING = ("epoch_seconds",)


def table(runs: Path, workers: int) -> pd.DataFrame:
    spec = parse_spec(tomllib.loads(SPEC), "det.toml", SPEC)
    folder = run_campaign(spec, RunOptions(runs_dir=runs, n_workers=workers, progress=False))
    study = load(folder.root, "det")
    rows = []
    for t in study.get_trials():
        metrics = {k: v for k, v in t.user_attrs["metrics"].items() if k not in TIMING}
        rows.append({"number": t.number, "state": t.state.name, "value": t.value, **t.params, **metrics})
    return pd.DataFrame(rows).sort_values("number").reset_index(drop=True)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_one_worker_and_two_workers_give_identical_trial_tables(tmp_path: Path) -> None:
    one = table(tmp_path / "one", workers=1)
    two = table(tmp_path / "two", workers=2)
    assert len(one) == 8 and (one["state"] == "COMPLETE").all()
    pd.testing.assert_frame_equal(one, two, check_exact=True)
    # TPE really used the results: its last trials are not the random start-up draws of another seed.
    assert one["lr"].nunique() == 8


def test_deterministic_refuses_pruning_and_time_budgets() -> None:
    with pytest.raises(SpecError, match="study.pruner: a deterministic campaign cannot prune"):
        parse_spec(tomllib.loads(SPEC.replace("parallelism = 2", 'parallelism = 2\npruner = "median"')), "d.toml")
    with pytest.raises(SpecError, match="study.time_budget"):
        parse_spec(tomllib.loads(SPEC.replace("parallelism = 2", "parallelism = 2\ntime_budget = 60")), "d.toml")


# --- the lag, trial by trial (the real Campaign on the simulated executor: virtual time, a second) -------

LAG_SPEC = """
[study]
name = "lag"
direction = "maximize"
metric = "score"
sampler = "random"
seed = 3
n_trials = {n_trials}
deterministic = true
parallelism = {parallelism}

[trainer]
entry = "bench.trivial:fit"
epochs = 2

[space]
x = {{ type = "float", low = 0.0, high = 1.0 }}
"""

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


class UnevenTrials:
    """Trials of 0.2 to 10 virtual seconds, so they finish far out of number order."""

    def plan(self, config, rng):  # type: ignore[no-untyped-def]
        epoch = float(rng.uniform(0.1, 5.0))
        return TrialPlan(
            (epoch, epoch), ({"score": 0.0, "epoch": 1.0}, {"score": float(config["number"]), "epoch": 2.0})
        )


class RecordsWhatItSaw(optuna.samplers.RandomSampler):
    """A random sampler that notes, for each trial it samples, the numbers of the trials finished in the study."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed=seed)
        self.saw: dict[int, list[int]] = {}

    def before_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        self.saw[trial.number] = sorted(t.number for t in study.get_trials(deepcopy=False, states=FINISHED))
        super().before_trial(study, trial)


def lag_campaign(tmp_path: Path, parallelism: int, workers: int, n_trials: int = 14) -> tuple[optuna.Study, dict]:
    text = LAG_SPEC.format(n_trials=n_trials, parallelism=parallelism)
    spec = parse_spec(tomllib.loads(text), "lag.toml", text)
    folder = CampaignFolder(tmp_path / "lag")
    folder.create(text)
    study = load_study(spec, folder, create=True)
    sampler = RecordsWhatItSaw(seed=1)
    study.sampler = sampler
    executor = SimulatedExecutor(workers, UnevenTrials(), seed=5, controller_time_scale=0)
    Campaign(spec, folder, study, executor, clock=executor.clock).run()
    return study, sampler.saw


@pytest.mark.timeout(120)  # a hang guard: this takes about a second
@pytest.mark.parametrize(("parallelism", "workers"), [(1, 1), (2, 1), (2, 2), (2, 4), (3, 2), (3, 5)])
def test_trial_k_is_sampled_from_exactly_trials_0_to_k_minus_p_minus_1(
    tmp_path: Path, parallelism: int, workers: int
) -> None:
    study, saw = lag_campaign(tmp_path, parallelism, workers)
    trials = study.get_trials()
    assert len(trials) == 14 and all(t.state == TrialState.COMPLETE for t in trials)
    finish_order = [t.number for t in sorted(trials, key=lambda t: (t.user_attrs["finished"], t.number))]
    if workers > 1:
        assert finish_order != sorted(finish_order), "the trials must finish out of order for this test to bite"
    assert sorted(saw) == list(range(14))
    for k in range(14):
        assert saw[k] == list(range(max(0, k - parallelism))), f"trial {k} (P={parallelism}) saw {saw[k]}"


@pytest.mark.timeout(120)
def test_sampler_saw_records_what_the_sampler_saw(tmp_path: Path) -> None:
    study, saw = lag_campaign(tmp_path, parallelism=2, workers=2)
    assert {t.number: t.user_attrs["sampler_saw"] for t in study.get_trials()} == {k: len(v) for k, v in saw.items()}
