"""The ``trial`` an objective gets, and the wrapper that runs it, with no cluster: a reporter that answers questions
as the controller would (in this process), or none (``reproduce``: the recorded suggestions replayed); and a trial in
a process of its own (a GPU lease's), whose questions its launcher passes on (a real child process, on the CPU)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import optuna
import pytest
from optuna.distributions import FloatDistribution

from search.loop.queries import answer
from search.objective.messages import ControllerRefused, suggestion
from search.objective.trainer import ObjectiveTrainer, values_as_metrics
from search.objective.trial import NotRecorded, ObjectiveTrial
from trainers.api import RecordingReporter, TrialConfig
from trainers.ddp import launch_solo


def config(number: int = 0, **params: Any) -> TrialConfig:
    return TrialConfig(study="s", number=number, params=params, seed=1, epochs=1)


class ControllerHere(RecordingReporter):
    """Answers each question as the campaign does, from a real in-memory study (no cluster)."""

    def __init__(self, pruned: str = "") -> None:
        super().__init__()
        self.study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
        self.trial = self.study.ask()
        self.questions: list[Mapping[str, Any]] = []
        self.stop_reason = pruned

    def query(self, question: Mapping[str, Any]) -> dict[str, Any]:
        self.questions.append(dict(question))
        return answer(self.trial, self.stop_reason, question).reply


def objective(trial: Any) -> float:
    kind = trial.suggest_categorical("kind", ["a", "b"])
    x = trial.suggest_float("x", 1e-3, 1.0, log=True)
    n = trial.suggest_int("n", 1, 9, step=2) if kind == "a" else 0
    trial.report(x, 0)
    if trial.should_prune():
        raise optuna.TrialPruned()
    trial.set_user_attr("kind", kind)
    return x + n


def test_each_suggestion_is_the_controllers_and_recorded_in_its_study() -> None:
    reporter = ControllerHere()
    metrics = ObjectiveTrainer(objective, ["value"])(config(), reporter)
    frozen = reporter.study.trials[0]
    assert metrics == {"value": frozen.params["x"] + frozen.params.get("n", 0)}
    assert frozen.user_attrs == {"kind": frozen.params["kind"]}
    assert reporter.reports == [(0, {"value": frozen.params["x"]})]
    assert [q["op"] for q in reporter.questions][-2:] == ["should_prune", "user_attr"]


def test_a_name_asked_again_keeps_its_value_and_an_incompatible_one_is_refused() -> None:
    trial = ObjectiveTrial(config(), ControllerHere(), ["value"])
    x = trial.suggest_float("x", 0.0, 1.0)
    assert trial.suggest_float("x", 0.0, 1.0) == x
    with pytest.raises(ValueError):
        trial.suggest_int("x", 0, 3)
    other = ControllerHere()
    other.trial.suggest_int("x", 0, 3)  # the controller's record says otherwise
    with pytest.raises(ControllerRefused, match="ValueError"):
        ObjectiveTrial(config(), other, ["value"]).suggest_float("x", 0.0, 1.0)


def test_a_trial_the_pruner_stopped_raises_trial_pruned_and_one_pruning_itself_says_so() -> None:
    assert ObjectiveTrainer(objective, ["value"])(config(), ControllerHere(pruned="pruned")) == {}
    reporter = ControllerHere()
    trial = ObjectiveTrial(config(), reporter, ["value"])
    trial.pruned()
    assert reporter.questions == [{"op": "pruned"}]
    assert answer(reporter.trial, "", {"op": "pruned"}).pruned
    assert not answer(reporter.trial, "pruned", {"op": "pruned"}).pruned  # stopped already: nothing to record


def test_without_a_controller_the_recorded_suggestions_are_replayed() -> None:
    recorded = {"kind": "a", "x": 0.5, "n": 3}
    reporter = RecordingReporter(stop_after=1)
    assert ObjectiveTrainer(objective, ["value"])(config(**recorded), RecordingReporter()) == {"value": 3.5}
    assert ObjectiveTrainer(objective, ["value"])(config(**recorded), reporter) == {}  # should_stop: pruned
    with pytest.raises(NotRecorded, match="'n'"):
        ObjectiveTrainer(objective, ["value"])(config(kind="a", x=0.5), RecordingReporter())


def test_multi_objective_values_and_what_optuna_refuses_there() -> None:
    assert values_as_metrics((1, 2.5), ["values_0", "values_1"]) == {"values_0": 1.0, "values_1": 2.5}
    with pytest.raises(ValueError, match="returned 1 value"):
        values_as_metrics(1.0, ["values_0", "values_1"])
    with pytest.raises(TypeError, match="return a number"):
        values_as_metrics(None, ["value"])
    trial = ObjectiveTrial(config(), RecordingReporter(), ["a", "b"])
    with pytest.raises(NotImplementedError):
        trial.report(1.0, 0)
    with pytest.raises(NotImplementedError):
        trial.should_prune()


def test_the_wrapper_carries_the_objectives_name() -> None:
    from trainers.api import entry_of

    assert entry_of(ObjectiveTrainer(objective, ["value"])) == f"{__name__}:objective"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_trial_in_a_process_of_its_own_asks_through_its_launcher() -> None:
    """The path of a trial holding a GPU lease (``cluster.entrypoint`` runs it with ``launch_solo``), on the CPU."""
    reporter = ControllerHere()
    metrics = launch_solo(ObjectiveTrainer(objective, ["value"]), config(), reporter, "")
    frozen = reporter.study.trials[0]
    assert metrics == {"value": pytest.approx(frozen.params["x"] + frozen.params.get("n", 0))}
    assert [q["op"] for q in reporter.questions][:2] == ["suggest", "suggest"]
    assert frozen.user_attrs == {"kind": frozen.params["kind"]}


def test_the_campaign_tests_objectives_are_plain_optuna_objectives() -> None:
    """What ``search.optimize`` is tested with runs as it is under ``study.optimize``: nothing was ported."""
    import objectives

    study = optuna.create_study(pruner=optuna.pruners.ThresholdPruner(upper=objectives.THRESHOLD))
    study.optimize(objectives.tutorial, n_trials=6, catch=(ValueError,))
    states = [t.state for t in study.trials]
    assert states[objectives.FAILS] == optuna.trial.TrialState.FAIL
    assert states[objectives.PRUNES_ITSELF] == optuna.trial.TrialState.PRUNED
    multi = optuna.create_study(directions=["minimize", "minimize"])
    multi.optimize(objectives.two_objectives, n_trials=2)
    assert all(len(t.values) == 2 for t in multi.trials)


def test_what_crosses_to_the_controller_is_plain() -> None:
    reporter = ControllerHere()
    trial = ObjectiveTrial(config(), reporter, ["value"])
    with pytest.raises(TypeError, match="must be JSON"):
        trial.set_user_attr("bad", object())
    trial.set_user_attr("pair", (1, 2))
    assert reporter.study.trials[0].user_attrs == {"pair": [1, 2]} and trial.user_attrs == {"pair": [1, 2]}


class NumpySampler(optuna.samplers.RandomSampler):
    def sample_independent(self, study: Any, trial: Any, name: str, distribution: Any) -> Any:
        import numpy as np

        return np.float64(0.25)


def test_a_suggestion_answered_is_a_builtin_float() -> None:
    reporter = ControllerHere()
    reporter.study.sampler = NumpySampler()
    value = ObjectiveTrial(config(), reporter, ["value"]).suggest_float("x", 0.0, 1.0)
    assert value == 0.25 and type(value) is float
    assert type(answer(reporter.trial, "", suggestion("x", FloatDistribution(0.0, 1.0))).reply["value"]) is float
