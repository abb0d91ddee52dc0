"""Placement that finishes in time (issue 52, point 3): real campaigns on the simulated cluster with a time budget
start the longest predicted trial first and start none predicted to run past the time left (one line says so)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from optuna.trial import TrialState
from toy_specs import toy_toml

from cluster.sim_models import CurveModel
from cluster.simulated import SimulatedExecutor
from cluster.trial_cost import LogLinearLaw, Resources
from search.loop.campaign import Campaign
from search.session.runner import load_study
from search.spec.campaign_spec import parse_spec
from search.store.folder import CampaignFolder
from search.store.records import TrialRecord

LAW = LogLinearLaw.power(2e-3, batch_size=-0.7)  # seconds per example: the smaller the batch, the longer
SPACE = {"batch_size": {"type": "int", "low": 16, "high": 512, "log": True}}
ENQUEUED = [128, 512, 16, 256, 32, 64, 24, 300]  # batch sizes, in the order they are enqueued


def campaign(tmp_path: Path, model: CurveModel, n_trials: int, lines: list[str], **study: object) -> Campaign:
    text = toy_toml("place", n_trials, 2, seed=4, space=SPACE, metric="accuracy", **study)
    spec = parse_spec(tomllib.loads(text), "place.toml", text, check_trainer=False)  # simulated: no trainer runs
    folder = CampaignFolder(tmp_path / "place")
    folder.create(text)
    executor = SimulatedExecutor(1, model, controller_time_scale=0)
    return Campaign(
        spec, folder, load_study(spec, folder, create=True), executor, clock=executor.clock, on_notice=lines.append
    )


def known_law(run: Campaign) -> None:
    """The trial model knows the law already, as a resumed campaign's does from its earlier trials."""
    earlier = []
    for number, batch_size in enumerate([16, 32, 64, 128, 256, 512, 20, 40, 80, 160]):
        seconds = LAW({"batch_size": batch_size}, Resources(1)) * 2000
        earlier.append(
            TrialRecord(
                number, TrialState.COMPLETE, {"batch_size": batch_size}, (0.5,),
                config={"epochs": 2}, width=1, duration=seconds, metrics={"examples": 2000.0},
            )
        )  # fmt: skip
    run.costs.load(earlier)


def start_order(run: Campaign) -> list[int]:
    trials = sorted(run.study.trials, key=lambda t: t.user_attrs["started"])
    return [t.params["batch_size"] for t in trials]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("time_budget", [0.0, 1e6])
def test_with_a_time_budget_the_longest_predicted_trial_starts_first(tmp_path: Path, time_budget: float) -> None:
    lines: list[str] = []
    model = CurveModel(seed=1, jitter=0.0, per_example=LAW, examples_per_epoch=1000)
    run = campaign(tmp_path, model, len(ENQUEUED), lines, time_budget=time_budget, dispatch_ahead=7, batch_trials=1)
    known_law(run)
    for batch_size in ENQUEUED:
        run.study.enqueue_trial({"batch_size": batch_size})
    run.run()
    if time_budget:
        assert start_order(run) == sorted(ENQUEUED)  # the smallest batch takes longest: it starts first
    else:
        assert start_order(run) == ENQUEUED  # no time budget: the order they were asked in
    assert not lines


@pytest.mark.timeout(120)
def test_no_trial_starts_that_is_predicted_to_run_past_the_time_left(tmp_path: Path) -> None:
    lines: list[str] = []
    model = CurveModel(seed=1, epoch_seconds=15.0, jitter=0.0)  # trials of 30 s; 100 s: three fit, a fourth not
    run = campaign(tmp_path, model, 10, lines, time_budget=100.0)
    run.run()
    states = [t.state for t in run.study.trials]
    assert states.count(TrialState.COMPLETE) == 3
    assert not [t for t in run.study.trials if t.user_attrs.get("stop_reason") == "time budget"]  # none cut short
    assert (
        len(lines) == 1 and "is predicted to take 30s but the time budget has 10s left when it would start" in lines[0]
    )
    assert "no more trials start" in lines[0]
