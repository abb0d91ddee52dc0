"""RefitTPESampler: Optuna's TPE exactly while the study is small, one fit for many asks once it is large."""

from __future__ import annotations

import pickle

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

from search.sampling.tpe import RefitTPESampler

SPACE = {
    "x": FloatDistribution(-2.0, 2.0),
    "op": CategoricalDistribution(["a", "b", "c", "d"]),
}


def _objective(params: dict) -> float:
    return (params["x"] - 0.5) ** 2 + {"a": 1.0, "b": 0.0, "c": 0.5, "d": 2.0}[params["op"]]


def _run(sampler: optuna.samplers.BaseSampler, n: int, in_flight: int = 4) -> list[dict]:
    """Ask/tell with ``in_flight`` trials running at once (the constant liar sees them)."""
    study = optuna.create_study(sampler=sampler)
    running: list[optuna.Trial] = []
    asked: list[dict] = []
    for _ in range(n):
        trial = study.ask(SPACE)
        asked.append(dict(trial.params))
        running.append(trial)
        if len(running) == in_flight:
            done = running.pop(0)
            study.tell(done, _objective(done.params))
    return asked


@pytest.mark.parametrize("multivariate", [True, False])
def test_below_200_trials_it_samples_what_optuna_samples(multivariate: bool) -> None:
    ours = _run(RefitTPESampler(seed=7, multivariate=multivariate, n_startup_trials=5), 150)
    optunas = _run(optuna.samplers.TPESampler(seed=7, multivariate=multivariate, n_startup_trials=5), 150)
    assert ours == optunas


def _large_study(sampler: optuna.samplers.BaseSampler, finished: int, running: int) -> optuna.Study:
    study = optuna.create_study(sampler=sampler)
    values = [_objective({"x": -2 + 4 * (k % 97) / 96, "op": "abcd"[k % 4]}) for k in range(finished)]
    trials = [
        create_trial(params={"x": -2 + 4 * (k % 97) / 96, "op": "abcd"[k % 4]}, distributions=SPACE, value=v)
        for k, v in enumerate(values)
    ]
    trials += [
        create_trial(params={"x": 0.0, "op": "a"}, distributions=SPACE, state=TrialState.RUNNING)
        for _ in range(running)
    ]
    study.add_trials(trials)
    return study


def test_a_large_study_is_refitted_once_it_grows_by_the_fraction() -> None:
    sampler = RefitTPESampler(seed=0, refit_fraction=0.01)
    study = _large_study(sampler, finished=2000, running=500)
    asked = [study.ask(SPACE).params for _ in range(60)]
    # 2,500 trials: a fit serves the asks until 25 more trials exist, so 60 asks take 3 fits (at 2500, 2526, 2552)
    assert sampler.refits == 3
    assert len({(p["x"], p["op"]) for p in asked}) == 60  # each ask draws its own candidates
    # the model steers: the cheapest op ("b") and x near 0.5 dominate the asks
    assert sum(p["op"] == "b" for p in asked) > 30
    assert sum(abs(p["x"] - 0.5) < 0.5 for p in asked) > 30


def test_refit_fraction_zero_refits_every_ask_and_a_bad_one_is_refused() -> None:
    sampler = RefitTPESampler(seed=0, refit_fraction=0.0)
    study = _large_study(sampler, finished=300, running=0)
    for _ in range(5):
        study.ask(SPACE)
    assert sampler.refits == 5
    for bad in (-0.1, 1.0, "0.1"):
        with pytest.raises(ValueError, match="refit_fraction must be a number in \\[0, 1\\)"):
            RefitTPESampler(refit_fraction=bad)  # type: ignore[arg-type]


def test_the_fits_are_not_pickled_and_another_study_refits() -> None:
    sampler = RefitTPESampler(seed=0, refit_fraction=0.5)
    study = _large_study(sampler, finished=300, running=0)
    study.ask(SPACE)
    assert sampler.refits == 1 and sampler._fits
    copy = pickle.loads(pickle.dumps(sampler))
    assert copy._fits == {}
    other = _large_study(sampler, finished=300, running=0)
    other.ask(SPACE)
    assert sampler.refits == 2  # the first study's fit is not used for the second


def test_in_a_discrete_space_the_kept_acquisition_values_change_no_choice() -> None:
    space = {f"e{i}": CategoricalDistribution(["none", "skip", "c1", "c3", "pool"]) for i in range(4)}

    def run(sampler: optuna.samplers.BaseSampler) -> list[dict]:
        study = optuna.create_study(sampler=sampler)
        asked = []
        for _ in range(120):
            trial = study.ask(space)
            asked.append(dict(trial.params))
            study.tell(trial, sum(len(v) for v in trial.params.values()))
        return asked

    ours = RefitTPESampler(seed=3, n_startup_trials=5)
    assert run(ours) == run(optuna.samplers.TPESampler(seed=3, n_startup_trials=5))
    assert ours.refits == 115  # below 200 trials: a fit per ask (after the 5 random ones)


def test_the_built_in_tpe_is_the_refit_sampler_and_takes_its_option() -> None:
    from search.sampling.samplers import make_sampler
    from spaces.params import parse_space

    space = parse_space({"x": {"type": "float", "low": 0.0, "high": 1.0}})
    sampler = make_sampler("tpe", space, 0, {"refit_fraction": 0.0})
    assert isinstance(sampler, RefitTPESampler) and sampler._refit_fraction == 0.0
