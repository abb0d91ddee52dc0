"""Conditional parameters (``when = { model = "mlp" }``) and constraints (``[study] constraints``), end to end.

Real campaigns on a real LocalCluster, with the trainer below (it runs on the workers, imported by
name like any trainer): a conditional parameter is absent from the trials where its condition does
not hold, in Optuna's parameters and in the trainer's config, whichever way the sampler runs
(inline on the loop, on a thread, in a child process on a replica study); constraint values reach
the trials and the sampler that reads them.
"""

from __future__ import annotations

import multiprocessing
import tomllib
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from cluster import ClusterOptions, DaskExecutor, open_cluster
from cluster.simulated import SimulatedExecutor, TrialPlan
from search.loop.campaign import Campaign
from search.session.runner import load_study
from search.spec.campaign_spec import SpecError, parse_spec
from search.store.folder import CampaignFolder
from search.store.records import TrialRecord
from trainers.api import Reporter, TrialConfig

BASE = {"mlp": 0.6, "cnn": 0.4}


def fit_model(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    """A trainer that says what it got: ``has_hidden``; ``size`` (hidden - 128) is the constraint metric."""
    params = config.params
    hidden = params.get("hidden")
    score = BASE[params["model"]] + (hidden or 0) / 1000 + float(params.get("depth", 0)) / 100
    metrics = {
        "score": score,
        "has_hidden": float("hidden" in params),
        "size": float((hidden or 0) - 128),
        "epoch": 1.0,
        "examples": 100.0,
        "steps": 1.0,
    }
    reporter.report(1, metrics)
    return metrics


fit_model.accepted_params = frozenset({"model", "hidden", "depth", "lr"})  # type: ignore[attr-defined]
REPORTED = frozenset({"score", "has_hidden", "size", "epoch", "examples", "steps"})
fit_model.reported_metrics = REPORTED  # type: ignore[attr-defined]

SPEC = """
[study]
name = "cond"
direction = "maximize"
metric = "score"
sampler = "{sampler}"
seed = 3
n_trials = {n_trials}
{extra}

[trainer]
entry = "test_conditional_space:fit_model"
epochs = 1

[space]
model = {{ type = "categorical", choices = ["mlp", "cnn"] }}
hidden = {{ type = "int", low = 32, high = 256, step = 32, when = {{ model = "mlp" }} }}
depth = {{ type = "int", low = 1, high = 3, when = {{ hidden = [192, 224, 256] }}, default = 0 }}
lr = 0.1
"""


def make(
    tmp_path: Path, sampler: str = "tpe", n_trials: int = 12, extra: str = "", name: str = "cond"
) -> tuple[Any, CampaignFolder, optuna.Study]:
    text = SPEC.format(sampler=sampler, n_trials=n_trials, extra=extra)
    spec = parse_spec(tomllib.loads(text), "cond.toml", text)
    folder = CampaignFolder(tmp_path / name)
    folder.create(text)
    return spec, folder, load_study(spec, folder, create=True)


def check_conditional(study: optuna.Study, reported: bool = True) -> None:
    """Each trial has ``hidden`` exactly when model = "mlp", ``depth`` exactly when hidden >= 192,
    in Optuna's params and in the trainer's config (``depth`` = 0 there otherwise)."""
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * len(trials)
    models = {t.params["model"] for t in trials}
    assert models == {"mlp", "cnn"}, models  # both branches ran
    for t in trials:
        config = TrialRecord.of(t).trainer_params
        mlp = t.params["model"] == "mlp"
        assert ("hidden" in t.params) == mlp and ("hidden" in config) == mlp, (t.params, config)
        deep = mlp and t.params["hidden"] >= 192
        assert ("depth" in t.params) == deep, t.params
        assert config["depth"] == (t.params["depth"] if deep else 0) and config["lr"] == 0.1
        assert set(t.distributions) == set(t.params)
        if reported:
            assert t.user_attrs["metrics"]["has_hidden"] == float(mlp)  # what the trainer itself saw


# --- spec errors -------------------------------------------------------------------------------------


def _spec_error(space: str, extra: str = "", sampler: str = "tpe", check_trainer: bool = False) -> SpecError:
    text = SPEC.format(sampler=sampler, n_trials=4, extra=extra)
    if space:
        text = text.split("[space]")[0] + "[space]\n" + space
    with pytest.raises(SpecError) as info:
        parse_spec(tomllib.loads(text), "cond.toml", text, check_trainer=check_trainer)
    return info.value


@pytest.mark.parametrize(
    ("space", "key", "fragment"),
    [
        (
            'model = "mlp"\nhidden = { type = "int", low = 1, high = 4, when = { modle = "mlp" } }',
            "space.hidden.when.modle",
            "unknown parameter; did you mean 'model'?",
        ),
        (
            'model = { type = "categorical", choices = ["mlp", "cnn"] }\n'
            'hidden = { type = "int", low = 1, high = 4, when = { model = "rnn" } }',
            "space.hidden.when.model",
            "'rnn' is not a value 'model' can take: ['mlp', 'cnn']",
        ),
        (
            'model = { type = "categorical", choices = ["mlp", "cnn"] }\n'
            'hidden = { type = "int", low = 1, high = 4, when = { model = ["mlp", "gru"] } }',
            "space.hidden.when.model",
            "'gru' is not a value",
        ),
        (
            'a = { type = "int", low = 1, high = 4, when = { b = 1 } }\n'
            'b = { type = "int", low = 1, high = 4, when = { c = 2 } }\n'
            'c = { type = "int", low = 1, high = 4, when = { a = 3 } }',
            "space.a.when",
            "conditions form a cycle: a -> b -> c -> a",
        ),
        (
            'a = { type = "int", low = 1, high = 4, when = { a = 1 } }',
            "space.a.when.a",
            "cannot name the parameter itself",
        ),
        (
            'lr = { type = "float", low = 0.1, high = 1.0 }\nh = { type = "int", low = 1, high = 4, when = { lr = 0.5 } }',
            "space.h.when.lr",
            "a condition may name a categorical, int, batch_size or fixed parameter; 'lr' is float",
        ),
        (
            'h = { type = "int", low = 1, high = 4, when = { w = 5 } }\nw = { type = "int", low = 2, high = 8, step = 2 }',
            "space.h.when.w",
            "5 is not a value 'w' can take: [2, 4, 6, 8]",
        ),
        (
            'model = "cnn"\nh = { type = "int", low = 1, high = 4, when = { model = "mlp" } }',
            "space.h.when.model",
            "never holds: 'model' is fixed at 'cnn'",
        ),
        ('h = { type = "int", low = 1, high = 4, default = 2 }', "space.h.default", "only a conditional parameter"),
        ('h = { type = "int", low = 1, high = 4, when = "model" }', "space.h.when", "must be a table"),
        ('h = { type = "int", low = 1, high = 4, wen = { m = 1 } }', "space.h.wen", "did you mean 'when'?"),
    ],
)
def test_bad_conditions_are_spec_errors_naming_the_key(space: str, key: str, fragment: str) -> None:
    error = _spec_error(space)
    assert error.key == key and fragment in error.problem, str(error)


def test_the_grid_sampler_refuses_a_conditional_space() -> None:
    error = _spec_error("", sampler="grid")
    assert error.key == "space.hidden.when" and "grid sampler needs every parameter in every trial" in str(error)


@pytest.mark.parametrize(
    ("sampler", "extra", "fragment"),
    [
        ("random", 'constraints = ["size"]', "sampler 'random' ignores constraints; use tpe, gp, nsga2"),
        ("cmaes", 'constraints = ["size"]', "sampler 'cmaes' ignores constraints"),
        ("tpe", 'constraints = "size"', "must be a list of reported metric names"),
        ("tpe", 'constraints = ["size", "size"]', "'size' is listed twice"),
    ],
)
def test_constraint_mistakes_are_spec_errors(sampler: str, extra: str, fragment: str) -> None:
    error = _spec_error('model = { type = "categorical", choices = ["mlp", "cnn"] }', extra, sampler)
    assert error.key == "study.constraints" and fragment in error.problem, str(error)


def test_a_constraint_the_trainer_never_reports_is_a_spec_error() -> None:
    error = _spec_error("", 'constraints = ["memory"]', check_trainer=True)
    assert error.key == "study.constraints" and "never reports 'memory'" in error.problem, str(error)


def test_constraints_parse_for_the_samplers_that_use_them() -> None:
    for sampler in ("tpe", "gp", "nsga2"):
        text = SPEC.format(sampler=sampler, n_trials=4, extra='constraints = ["size"]')
        assert parse_spec(tomllib.loads(text), "c.toml", text).study.constraints == ("size",)


# --- campaigns -----------------------------------------------------------------------------------------


class _Instant:
    """A simulated trial: one epoch, the score from the parameters (no trainer runs)."""

    def plan(self, config: Any, rng: Any) -> TrialPlan:
        params = config["params"]
        score = BASE[params["model"]] + (params.get("hidden") or 0) / 1000
        size = float((params.get("hidden") or 0) - 128)
        return TrialPlan((1.0,), ({"score": score, "size": size, "epoch": 1.0, "examples": 100.0, "steps": 1.0},))


@pytest.mark.parametrize("sampler", ["tpe", "random", "cmaes", "qmc", "gp", "nsga2"])
def test_every_sampler_but_grid_runs_a_conditional_space_inline(tmp_path: Path, sampler: str) -> None:
    spec, folder, study = make(tmp_path, sampler=sampler, n_trials=10)
    executor = SimulatedExecutor(2, _Instant(), controller_time_scale=0)
    campaign = Campaign(spec, folder, study, executor, clock=executor.clock)
    campaign.run()
    assert campaign.supply.sampling == "inline"
    check_conditional(study, reported=False)


class RecordingTPE(optuna.samplers.TPESampler):
    """TPE that keeps the constraint values each tell showed it (its copy comes back from a child)."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed=seed)
        self.seen: dict[int, dict[str, float]] = {}

    def after_trial(self, study, trial, state, values):  # type: ignore[no-untyped-def]
        self.seen[trial.number] = dict(trial.constraints)
        super().after_trial(study, trial, state, values)


def check_constraints(study: optuna.Study, spec: Any, campaign: Campaign) -> None:
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * len(trials)
    for t in trials:
        size = t.user_attrs["metrics"]["size"]
        assert t.constraints == {"size": size}  # Trial.set_constraint before the tell
        assert t.system_attrs["constraints:size"] == size
    sampler = study.sampler
    assert isinstance(sampler, RecordingTPE)  # in a child: its copy came back with what it saw
    assert sampler.seen == {t.number: {"size": t.user_attrs["metrics"]["size"]} for t in trials}
    feasible = [t for t in trials if t.constraints["size"] <= 0]
    assert feasible and len(feasible) < len(trials)  # the campaign saw both
    best = max(feasible, key=lambda t: t.value)
    assert study.best_trial.number == best.number  # Optuna prefers feasible trials
    assert campaign.ledger.best == best.value  # and so does the progress line


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_conditional_parameters_and_constraints_on_a_real_cluster_in_every_sampling_mode(tmp_path: Path) -> None:
    """The trainer gets ``hidden`` only when model = "mlp", sampled in a child process (auto for TPE),
    on a thread and on the loop; constraint values reach the trials and the (child's) sampler."""
    with open_cluster(ClusterOptions(n_workers=1)) as client:
        for mode in ("auto", "thread", "inline"):
            extra = 'constraints = ["size"]' + ("" if mode == "auto" else f'\nsampling = "{mode}"')
            spec, folder, study = make(tmp_path, n_trials=14, extra=extra, name=f"cond-{mode}")
            study.sampler = RecordingTPE(seed=3)
            campaign = Campaign(spec, folder, study, DaskExecutor(client, f"test-cond-{mode}"))
            campaign.run()
            assert campaign.supply.sampling == ("process" if mode == "auto" else mode)
            check_conditional(study)
            check_constraints(study, spec, campaign)
    assert multiprocessing.active_children() == []


def test_a_complete_trial_without_its_constraint_value_fails(tmp_path: Path) -> None:
    class NoSize(_Instant):
        def plan(self, config: Any, rng: Any) -> TrialPlan:
            plan = super().plan(config, rng)
            metrics = tuple({k: v for k, v in m.items() if k != "size"} for m in plan.metrics)
            return TrialPlan(plan.epoch_seconds, metrics)

    spec, folder, study = make(tmp_path, n_trials=2, extra='constraints = ["size"]')
    executor = SimulatedExecutor(1, NoSize(), controller_time_scale=0)
    Campaign(spec, folder, study, executor, clock=executor.clock).run()
    for t in study.get_trials():
        assert t.state == TrialState.FAIL and t.constraints == {}
        assert "did not return a finite value for each constraint" in t.user_attrs["fail_reason"]


def test_the_best_table_puts_feasible_trials_first() -> None:
    from optuna.distributions import FloatDistribution

    from search.reports.summary import best_table

    study = optuna.create_study(direction="maximize")
    dist = {"x": FloatDistribution(0.0, 1.0)}
    for x, size in ((0.9, 3.0), (0.5, -1.0), (0.4, 0.0)):  # the best value breaks the constraint
        trial = study.ask(fixed_distributions=dist)
        trial.set_constraint("size", size)
        trial.set_user_attr("metrics", {"score": x})
        study.tell(trial, x)
    table = best_table(study, ("score",), ("maximize",))
    assert list(table["number"]) == [1, 2]
