"""``[study] slot_hours`` (issue 52, point 2): a real campaign on the simulated cluster stops asking once one more
trial's predicted cost does not fit, says so in one line, and spends no more than the budget and one trial."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from optuna.trial import TrialState
from toy_specs import toy_toml

from cluster.sim_models import CurveModel
from cluster.simulated import SimulatedExecutor
from search.loop.campaign import Campaign, CampaignError
from search.session.runner import load_study
from search.spec.campaign_spec import parse_spec
from search.store.folder import CampaignFolder

SPACE = {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}}


def campaign(
    tmp_path: Path, jitter: float, resource: str = "CPU", workers: int = 4, epochs: int = 2, **study: object
) -> tuple[Campaign, list[str]]:
    text = toy_toml("budget", 200, epochs, seed=4, space=SPACE, metric="accuracy", **study)
    spec = parse_spec(tomllib.loads(text), "budget.toml", text, check_trainer=False)  # simulated: no trainer runs
    folder = CampaignFolder(tmp_path / "budget")
    folder.create(text)
    model = CurveModel(seed=2, epoch_seconds=5.0 * 2 / epochs, jitter=jitter)
    executor = SimulatedExecutor(workers, model, controller_time_scale=0, resource=resource)
    lines: list[str] = []
    study_ = load_study(spec, folder, create=True)
    return Campaign(spec, folder, study_, executor, clock=executor.clock, on_notice=lines.append), lines


@pytest.mark.timeout(120)
@pytest.mark.parametrize("jitter", [0.0, 0.3])
def test_asking_stops_when_one_more_trial_does_not_fit_in_the_slot_hours_left(tmp_path: Path, jitter: float) -> None:
    run, lines = campaign(tmp_path, jitter, slot_hours=0.1)  # 360 slot-seconds: about 36 trials of 10 s
    run.run()
    limit = 360.0
    one_trial = run.costs.per_trial().mean
    assert limit - 2 * one_trial <= run.costs.spent <= limit + one_trial, (run.costs.spent, one_trial)
    finished = [t for t in run.study.trials if t.state == TrialState.COMPLETE]
    assert 30 <= len(finished) <= 40  # not the 200 of the trial budget
    assert len(lines) == 1 and "[study] slot_hours = 0.1:" in lines[0] and "no more trials start" in lines[0]
    assert not [t for t in run.study.trials if t.state == TrialState.RUNNING]


@pytest.mark.timeout(120)
def test_the_first_wave_on_many_slots_stops_within_a_small_budget(tmp_path: Path) -> None:
    """64 slots, a budget of 30 trials of 10 s (ten 1 s epochs): the first wave starts before any cost is known and
    would spend 640 slot-seconds (the old code: 34 trials over). Once the first epochs tell each trial's whole run,
    the trials with the most cost left are stopped (PRUNED, ``resource budget``) until the rest fit."""
    run, lines = campaign(tmp_path, 0.0, workers=64, epochs=10, slot_hours=300 / 3600)
    run.run()
    one_trial = 10.0
    assert run.costs.spent <= 300.0 + one_trial, run.costs.spent
    stopped = [t for t in run.study.trials if t.user_attrs.get("stop_reason") == "resource budget"]
    assert stopped and all(t.state == TrialState.PRUNED for t in stopped)
    finished = [t for t in run.study.trials if t.state == TrialState.COMPLETE]
    assert 10 <= len(finished) <= 30
    assert len(lines) == 1 and "no more trials start" in lines[0]


def test_a_gpu_hour_budget_on_cpu_slots_is_refused_in_one_line(tmp_path: Path) -> None:
    run, _lines = campaign(tmp_path, 0.0, gpu_hours=1.0)
    with pytest.raises(CampaignError, match=r"gpu_hours = 1: the cluster's slots are CPU slots, not GPUs"):
        run.run()


@pytest.mark.timeout(120)
def test_gpu_hours_count_a_slot_as_its_share_of_a_gpu(tmp_path: Path) -> None:
    run, lines = campaign(tmp_path, 0.0, resource="GPU", gpu_hours=0.05, trainer={"gpus": 0.5})  # = 0.1 slot-hours
    run.run()
    assert 360.0 - 20.0 <= run.costs.spent <= 360.0 + 10.0
    assert "[study] gpu_hours = 0.05:" in lines[0]
