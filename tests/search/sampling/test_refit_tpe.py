"""RefitTPESampler: Optuna's TPE exactly while the study is small, one fit for many asks once it is large."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import optuna
import pytest
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution
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


def _categorical_study(
    sampler: optuna.samplers.BaseSampler, space: dict[str, BaseDistribution], finished: int, running: int
) -> optuna.Study:
    rng = np.random.default_rng(5)
    study = optuna.create_study(sampler=sampler)
    trials = []
    for k in range(finished + running):
        params = {name: d.choices[int(rng.integers(len(d.choices)))] for name, d in space.items()}
        state = TrialState.COMPLETE if k < finished else TrialState.RUNNING
        value = float(rng.normal()) if k < finished else None
        trials.append(create_trial(params=params, distributions=space, value=value, state=state))
    study.add_trials(trials)
    return study


@pytest.mark.parametrize("multivariate", [True, False])
def test_a_large_categorical_space_has_its_acquisition_tabulated_with_optunas_values(multivariate: bool) -> None:
    space: dict[str, BaseDistribution] = {
        f"e{i}": CategoricalDistribution(["none", "skip", "c1", "c3", "pool"]) for i in range(4)
    }
    space["k"] = CategoricalDistribution([1, 2, 3])
    sampler = RefitTPESampler(seed=0, multivariate=multivariate, constant_liar=True)
    study = _categorical_study(sampler, space, finished=3000, running=500)
    study.ask(space)
    fits = list(sampler._fits.values())
    assert fits and all(fit.grid is not None for fit in fits)
    for fit in fits:
        assert fit.grid is not None
        names = list(fit.below._search_space)
        grid_points = np.indices(fit.grid.shape).reshape(len(names), -1)
        samples = {name: grid_points[i].astype(float) for i, name in enumerate(names)}
        optunas = sampler._compute_acquisition_func(samples, fit.below, fit.above)
        assert fit.grid.reshape(-1) == pytest.approx(optunas, rel=1e-9, abs=1e-9)
    if multivariate:  # 24 candidates of 1,875 points: the asks still differ (one parameter at a time, each of
        # a handful of choices, the same best choice wins every ask of a fit, with the table or without)
        assert len({tuple(study.ask(space).params.values()) for _ in range(30)}) > 5


def test_no_table_for_numbers_a_huge_space_or_a_fit_that_serves_one_ask() -> None:
    mixed = RefitTPESampler(seed=0, multivariate=True)
    _large_study(mixed, finished=3000, running=0).ask(SPACE)  # a float in the space
    assert [fit.grid for fit in mixed._fits.values()] == [None]

    huge: dict[str, BaseDistribution] = {
        f"e{i}": CategoricalDistribution(list(range(10))) for i in range(6)
    }  # 10**6 points
    sampler = RefitTPESampler(seed=0, multivariate=True)
    _categorical_study(sampler, huge, finished=1000, running=0).ask(huge)
    assert [fit.grid for fit in sampler._fits.values()] == [None]

    small: dict[str, BaseDistribution] = {f"e{i}": CategoricalDistribution([0, 1]) for i in range(3)}
    every_ask = RefitTPESampler(seed=0, multivariate=True, refit_fraction=0.001)  # 300 trials: a fit per ask
    _categorical_study(every_ask, small, finished=300, running=0).ask(small)
    assert [fit.grid for fit in every_ask._fits.values()] == [None]


def test_the_startup_is_random_without_a_walk_per_parameter_and_ends_once_the_study_grows() -> None:
    space: dict[str, BaseDistribution] = {f"e{i}": CategoricalDistribution(["a", "b", "c"]) for i in range(4)}
    sampler = RefitTPESampler(seed=0, refit_fraction=0.01, n_startup_trials=10)
    study = _categorical_study(sampler, space, finished=0, running=3000)
    walks = 0
    get_trials = study._get_trials

    def counted(*args: object, **kwargs: object) -> list:
        nonlocal walks
        walks += 1
        return get_trials(*args, **kwargs)  # type: ignore[arg-type]

    study._get_trials = counted  # type: ignore[method-assign]
    running = [study.ask(space) for _ in range(3)]
    assert sampler.refits == 0 and walks <= 3 * 2  # a search-space walk and one startup count per ask, not 4
    for trial in running + [study.ask(space) for _ in range(7)]:
        study.tell(trial, 1.0)
    study.ask(space)
    assert sampler.refits == 0  # 10 finished, but the "not yet" holds until the study grows by 1% (30 trials)
    for _ in range(31):
        study.ask(space)
    assert sampler.refits >= 1


def test_the_kept_intersection_is_optunas_for_a_space_that_changes() -> None:
    from optuna.search_space import IntersectionSearchSpace

    sampler = RefitTPESampler(seed=0, multivariate=True, refit_fraction=0.0)
    study = optuna.create_study(sampler=sampler)
    x, y = FloatDistribution(0, 1), FloatDistribution(0, 2)
    spaces: list[dict[str, BaseDistribution]] = [
        {"x": x, "y": y},
        {"x": x},
        {"x": x, "y": y},
        {"x": FloatDistribution(0, 3), "y": y},
    ]
    for k in range(40):
        space = spaces[k % 4] if k >= 20 else {"x": x, "y": y}
        state = [TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL, TrialState.RUNNING][k % 4 if k >= 20 else 0]
        params = {name: 0.5 for name in space}
        value = 1.0 if state == TrialState.COMPLETE else None
        study.add_trial(create_trial(params=params, distributions=space, state=state, value=value))
        frozen = study.trials[-1]
        study._thread_local.cached_all_trials = None  # as each ask starts
        expected = IntersectionSearchSpace(include_pruned=True).calculate(study)
        assert sampler.infer_relative_search_space(study, frozen) == expected, k
    # the running trials end (their x is another distribution): folded in once they have
    before = sampler.infer_relative_search_space(study, study.trials[-1])
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study._storage.set_trial_state_values(trial._trial_id, TrialState.COMPLETE, [1.0])
    study.add_trial(create_trial(params={"x": 0.5, "y": 0.5}, distributions={"x": x, "y": y}, value=1.0))
    study._thread_local.cached_all_trials = None
    expected = IntersectionSearchSpace(include_pruned=True).calculate(study)
    assert sampler.infer_relative_search_space(study, study.trials[-1]) == expected != before


def test_a_running_trials_proposal_is_not_kept_as_its_parameters() -> None:
    import json

    from optuna.samplers._tpe.sampler import _RELATIVE_PARAMS_KEY

    sampler = RefitTPESampler(seed=0, multivariate=True, constant_liar=True)
    study = optuna.create_study(sampler=sampler)
    space: dict[str, BaseDistribution] = {"x": FloatDistribution(0.0, 1.0)}
    trial_id = study._storage.create_new_trial(study._study_id)
    study._storage.set_trial_system_attr(trial_id, f"{_RELATIVE_PARAMS_KEY}:0", json.dumps({"x": 0.1}))

    def column() -> list[float]:
        return sampler._get_internal_repr(study.get_trials(deepcopy=False), space, study)["x"].tolist()

    assert column() == [0.1]  # the sampler's proposal, as Optuna reads a running trial
    study._storage.set_trial_param(trial_id, "x", 0.9, space["x"])  # a fixed value overrides it
    assert column() == [0.9]
    study._storage.set_trial_state_values(trial_id, TrialState.COMPLETE, [1.0])
    assert column() == [0.9]


MIXED = {
    "lr": FloatDistribution(1e-5, 1.0, log=True),
    "x": FloatDistribution(-2.0, 2.0),
    "drop": FloatDistribution(0.0, 0.5, step=0.05),
    "layers": optuna.distributions.IntDistribution(1, 8),
    "width": optuna.distributions.IntDistribution(16, 1024, log=True),
    "op": CategoricalDistribution(["a", "b", "c", "d"]),
}


@pytest.mark.parametrize("multivariate", [True, False])
def test_the_fitted_density_is_optunas_log_pdf_bit_for_bit(multivariate: bool) -> None:
    from optuna.samplers._tpe.parzen_estimator import _ParzenEstimator, _ParzenEstimatorParameters

    from search.sampling.tpe_density import FittedLogPdf

    rng = np.random.RandomState(0)
    observations = {
        name: np.asarray([d.to_internal_repr(v) for v in _draws(d, rng, 300)], dtype=float) for name, d in MIXED.items()
    }
    params = _ParzenEstimatorParameters(
        prior_weight=1.0,
        consider_magic_clip=True,
        consider_endpoints=False,
        weights=optuna.samplers._tpe.sampler.default_weights,
        multivariate=multivariate,
    )
    estimator = _ParzenEstimator(observations, MIXED, params)
    samples = estimator.sample(rng, 200)
    for name, d in MIXED.items():  # the ends of each range, and one value outside it, as well
        if not isinstance(d, CategoricalDistribution):
            samples[name][:3] = [d.low, d.high, d.high * 2]
    fitted = FittedLogPdf(estimator)
    for _ in range(2):  # asked again: the kept constants serve
        assert np.array_equal(fitted(samples), estimator.log_pdf(samples), equal_nan=True)
    outside = fitted(samples)[2]
    assert outside == -np.inf  # a value outside the range: Optuna's -inf, from the full path


def _draws(d: BaseDistribution, rng: np.random.RandomState, n: int) -> list:
    if isinstance(d, CategoricalDistribution):
        return [d.choices[i] for i in rng.randint(len(d.choices), size=n)]
    values = rng.uniform(d.low, d.high, size=n)
    if getattr(d, "step", None):
        values = d.low + np.round((values - d.low) / d.step) * d.step
    return [int(v) if isinstance(d, optuna.distributions.IntDistribution) else float(v) for v in values]


def test_a_float_space_past_200_trials_samples_what_optunas_density_would(monkeypatch: pytest.MonkeyPatch) -> None:
    def run(n: int) -> tuple[list[dict], int]:
        sampler = RefitTPESampler(seed=11, n_startup_trials=5)
        study = optuna.create_study(sampler=sampler)
        asked = []
        for _ in range(n):
            trial = study.ask(MIXED)
            asked.append(dict(trial.params))
            study.tell(trial, trial.params["x"] ** 2 + trial.params["layers"] - np.log10(trial.params["lr"]))
        return asked, sampler.refits

    fitted, refits = run(400)
    assert refits < 300  # past 200 trials fits are shared: the kept density served
    monkeypatch.setattr(
        RefitTPESampler, "_log_ratio", lambda self, fit, s: self._compute_acquisition_func(s, fit.below, fit.above)
    )
    assert run(400)[0] == fitted


def _tabulated() -> tuple[RefitTPESampler, dict[str, BaseDistribution], Any]:
    """A sampler with one tabulated fit of a 27-point space (2,000 finished trials, 300 running), the space, the fit."""
    space: dict[str, BaseDistribution] = {f"e{i}": CategoricalDistribution(["a", "b", "c"]) for i in range(3)}
    sampler = RefitTPESampler(seed=0, multivariate=True, constant_liar=True)
    study = _categorical_study(sampler, space, finished=2000, running=300)
    study.ask(space)
    (fit,) = sampler._fits.values()
    assert fit.grid is not None and fit.cumulative is not None
    return sampler, space, fit


def test_a_tabulated_fit_draws_its_candidates_from_the_below_density_as_optuna_does() -> None:
    from search.sampling.tpe import _categorical_density, _draw_points

    _, space, fit = _tabulated()
    low = _categorical_density(fit.below)
    assert low is not None and low.max() > 2 * low.min()  # the model is far from uniform
    rng = np.random.RandomState(3)
    n = 200_000
    ours = np.bincount(_draw_points(fit.cumulative, rng, n), minlength=low.size) / n
    drawn = fit.below.sample(rng, n)  # Optuna's draw: a kernel, then each parameter's choice from it
    flat = np.ravel_multi_index(tuple(drawn[name].astype(np.intp) for name in space), low.shape)
    optunas = np.bincount(flat, minlength=low.size) / n
    assert np.abs(ours - low.reshape(-1)).max() < 0.005
    assert np.abs(optunas - low.reshape(-1)).max() < 0.005


def test_a_tabulated_ask_is_the_best_of_its_candidates() -> None:
    sampler, space, fit = _tabulated()
    picked = [sampler._draw_from_grid(fit, space) for _ in range(200)]
    values = [float(fit.grid[tuple("abc".index(p[name]) for name in space)]) for p in picked]
    # 24 candidates from l(x): the pick is at least as good as the median point of l(x), and mostly the best ones
    order = np.sort(fit.grid.reshape(-1))
    assert min(values) >= order[len(order) // 2]
    assert np.mean(values) > np.quantile(order, 0.8)


def test_the_distinct_kernel_rows_are_found_in_order_and_a_mismatch_is_refused() -> None:
    from search.sampling.tpe import _distinct_rows

    prior = [1 / 3, 1 / 3, 1 / 3]
    rows = np.array([[0.1, 0.8, 0.1], prior, [0.8, 0.1, 0.1], [0.1, 0.8, 0.1], prior])
    found = _distinct_rows(rows)
    assert found is not None
    distinct, inverse = found
    assert distinct.tolist() == [[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], prior]  # by top choice, the flat row last
    assert inverse.tolist() == [1, 2, 0, 1, 2]
    assert _distinct_rows(np.array([[0.1, 0.8, 0.1], [0.2, 0.7, 0.1]])) is None  # one key, two rows


def test_the_intersections_quick_equality_answers_as_optunas() -> None:
    from optuna.distributions import IntDistribution

    from search.sampling.tpe import _equal

    nan = float("nan")
    kinds = [
        lambda: CategoricalDistribution(["a", "b", "c"]),
        lambda: CategoricalDistribution(["a", "b"]),
        lambda: CategoricalDistribution([1, 2.0, None]),
        lambda: CategoricalDistribution([1.0, 2, None]),
        lambda: CategoricalDistribution([float("nan"), 1]),  # a NaN of its own in each copy
        lambda: CategoricalDistribution([nan, 1]),
        lambda: FloatDistribution(0.0, 1.0),
        lambda: FloatDistribution(0.0, 1.0, log=False, step=0.5),
        lambda: IntDistribution(0, 3),
    ]
    for make in kinds:
        for other in kinds:
            a, b = make(), other()
            assert _equal(a, b) == (a == b), (a, b)
    assert _equal(None, FloatDistribution(0.0, 1.0)) is False
    assert _equal(CategoricalDistribution([float("nan")]), CategoricalDistribution([float("nan")]))  # Optuna's answer
