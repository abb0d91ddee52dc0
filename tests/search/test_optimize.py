"""``search.optimize(objective)``: an Optuna objective, unchanged, on real Dask workers (an embedded cluster of worker
processes), each suggestion answered by the controller, a real journal storage; then ``status``, ``report`` and
``reproduce`` of the campaign, as of any other."""

from __future__ import annotations

import json
from pathlib import Path

import objectives
import optuna
import pytest
from optuna.trial import TrialState

import search
from search.api import Result
from search.reports.status import status_text
from search.store.records import TrialRecord
from tests.search.dask_processes import external_cluster

pytestmark = pytest.mark.slow  # each test runs a campaign on a cluster of worker processes

N_TRIALS = 10


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory: pytest.TempPathFactory) -> Result:
    runs = tmp_path_factory.mktemp("optimize") / "runs"
    return search.optimize(
        objectives.tutorial,
        n_trials=N_TRIALS,
        pruner=optuna.pruners.ThresholdPruner(upper=objectives.THRESHOLD),
        sampler="random",
        runs_dir=runs,
        n_workers=2,
        progress=False,
    )


def trials(result: Result) -> dict[int, optuna.trial.FrozenTrial]:
    return {t.number: t for t in result.study.get_trials(deepcopy=False)}


@pytest.mark.timeout(180)
def test_a_conditional_objective_gets_its_branch_parameters_only(tutorial: Result) -> None:
    done = trials(tutorial)
    assert sorted(done) == list(range(N_TRIALS))
    for trial in done.values():
        expected = {"kind", "x", "y", "lr"} if trial.params["kind"] == "quadratic" else {"kind", "x"}
        assert set(trial.params) == expected, trial.number
        assert trial.distributions["x"] == optuna.distributions.FloatDistribution(0.0, 10.0)
    assert tutorial.spec.trainer.objective and tutorial.spec.study.metrics == ("value",)


@pytest.mark.timeout(180)
def test_should_prune_answers_from_the_controllers_pruner_after_each_report(tutorial: Result) -> None:
    for number, trial in trials(tutorial).items():
        if number in (objectives.FAILS, objectives.PRUNES_ITSELF, objectives.RESERVED):
            continue
        first = trial.intermediate_values[0]
        if first > objectives.THRESHOLD:  # pruned at the report that crossed the threshold, not one step later
            assert trial.state == TrialState.PRUNED and list(trial.intermediate_values) == [0], number
            assert trial.user_attrs["stop_reason"] == "pruned"
        else:
            assert trial.state == TrialState.COMPLETE, (number, trial.user_attrs.get("fail_reason"))
            assert list(trial.intermediate_values) == list(range(objectives.STEPS))
            assert trial.value == pytest.approx(first - (objectives.STEPS - 1))
            assert trial.user_attrs["branch"] == trial.params["kind"]  # set_user_attr, written by the controller


@pytest.mark.timeout(180)
def test_trial_pruned_raised_by_the_objective_and_a_failing_objective(tutorial: Result) -> None:
    done = trials(tutorial)
    pruned = done[objectives.PRUNES_ITSELF]
    assert pruned.state == TrialState.PRUNED and pruned.user_attrs["stop_reason"] == "pruned"
    failed = done[objectives.FAILS]
    assert failed.state == TrialState.FAIL
    assert failed.user_attrs["fail_reason"] == "ValueError: this objective fails on purpose"
    refused = done[objectives.RESERVED]
    assert refused.state == TrialState.FAIL
    assert "user attribute 'config' is one the campaign writes itself" in refused.user_attrs["fail_reason"]
    assert isinstance(refused.user_attrs["config"], dict)  # the campaign's record, untouched


@pytest.mark.timeout(300)
def test_status_report_and_reproduce_of_an_objective_campaign(tutorial: Result) -> None:
    done = trials(tutorial)
    text = status_text(tutorial.folder)
    best = min((t for t in done.values() if t.state == TrialState.COMPLETE), key=lambda t: t.value)
    assert f"{N_TRIALS} of {N_TRIALS} trials" in text and f"(trial {best.number})" in text
    assert f"x={best.params['x']}" in text  # the suggested parameters, as the objective got them
    assert tutorial.best_params == best.params
    page = tutorial.report().read_text()
    assert "epochs per trial" not in page  # an objective's trials have no epochs of ours
    assert "Which settings of kind, x, y, lr (as the objective suggested them)" in page
    assert "one of: quadratic, absolute" in page and "log-uniform float from 0.0001 to 0.1 (in " in page
    pruned = next(n for n, t in done.items() if t.state == TrialState.PRUNED and n != objectives.PRUNES_ITSELF)
    for number in (best.number, pruned):
        reproduction = tutorial.reproduce(number)
        assert reproduction.matched and not reproduction.error, (number, reproduction.checks)
        assert reproduction.config["params"] == done[number].params  # the recorded suggestions, replayed


@pytest.mark.timeout(180)
def test_a_tuple_returned_is_a_multi_objective_trial(tmp_path: Path) -> None:
    result = search.optimize(
        objectives.two_objectives,
        n_trials=4,
        directions=["minimize", "minimize"],
        runs_dir=tmp_path / "runs",
        n_workers=2,
        progress=False,
    )
    assert result.spec.study.metrics == ("values_0", "values_1")
    for trial in result.study.trials:
        assert trial.state == TrialState.COMPLETE
        assert trial.values == [trial.params["x"], trial.params["x"] ** 2]
    assert len(result.best) >= 1  # the Pareto front


@pytest.mark.timeout(240)
def test_a_trial_whose_worker_died_runs_again_from_its_checkpoint_with_its_suggestions(tmp_path: Path) -> None:
    result = search.optimize(objectives.dies_once, n_trials=1, runs_dir=tmp_path / "runs", n_workers=1, progress=False)
    (trial,) = result.study.trials
    assert trial.state == TrialState.COMPLETE and trial.value == 0.0
    record = TrialRecord.of(trial)
    assert record.retries == 1
    saved = result.folder / "trials" / "0" / "checkpoint.json"
    assert trial.user_attrs["resumed_from"] == str(saved)
    assert json.loads(saved.read_text())["x"] == trial.params["x"]


@pytest.mark.timeout(240)
def test_objective_trials_holding_a_fake_gpu_lease_ask_from_a_process_of_their_own(tmp_path: Path) -> None:
    """Fake GPUs: a worker declaring ``GPU=1`` on a machine without CUDA; each trial leases it, so it runs in a child
    process that sees only its lease, whose questions its launcher passes on."""
    with external_cluster(tmp_path / "cluster", n_workers=1, resources="GPU=1") as cluster:
        result = search.optimize(
            objectives.where_it_runs,
            n_trials=2,
            gpus=1,
            scheduler=cluster.address,
            runs_dir=tmp_path / "runs",
            progress=False,
        )
    trials = result.study.trials
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2, [t.user_attrs.get("fail_reason") for t in trials]
    for trial in trials:
        assert trial.user_attrs["visible"] == "0" and trial.user_attrs["leased"] == [0]  # its lease, as cuda:0
        assert trial.value == trial.params["x"]
    assert len({t.user_attrs["pid"] for t in trials}) == 2  # a process each
