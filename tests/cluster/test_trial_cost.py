"""The trial model (cluster.trial_cost): a log-linear fit with a residual spread, the nearest values with few points."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cluster.packing import MemoryModel
from cluster.trial_cost import Basis, Estimate, LogLinearLaw, Quantity, Resources, TrialCostModel

LAW = LogLinearLaw.power(2e-4, batch_size=-0.7, width=-0.9)
NOISE = 0.1  # log-spread of the observations around the law


def _draw(rng: np.random.Generator) -> tuple[dict[str, object], Resources, float]:
    params = {"batch_size": int(2 ** rng.integers(4, 10)), "lr": float(10 ** rng.uniform(-4, -1)), "act": "relu"}
    resources = Resources(int(rng.integers(1, 5)))
    return params, resources, LAW(params, resources) * float(rng.lognormal(0.0, NOISE))


def test_the_fit_recovers_a_power_law_and_its_interval_covers_new_trials() -> None:
    rng = np.random.default_rng(7)
    model = TrialCostModel()
    for number in range(60):
        params, resources, per_example = _draw(rng)
        model.observe_progress(number, params, resources, per_example * 500, 500)
    fit = model.fit(Quantity.PER_EXAMPLE)
    assert fit is not None
    assert fit.law.slopes["batch_size"] == pytest.approx(-0.7, abs=0.05)
    assert fit.law.slopes["width"] == pytest.approx(-0.9, abs=0.08)
    assert abs(fit.law.slopes["lr"]) < 0.05  # the learning rate does not change the time per example
    assert fit.law.spread == pytest.approx(NOISE, rel=0.3)
    fresh = [_draw(rng) for _ in range(400)]
    inside = sum(
        model.predict(Quantity.PER_EXAMPLE, p, r).low <= v <= model.predict(Quantity.PER_EXAMPLE, p, r).high
        for p, r, v in fresh
    )
    assert 0.82 <= inside / len(fresh) <= 0.97  # a 90% interval
    estimate = model.predict_duration({"batch_size": 128}, Resources(2), examples=10_000)
    assert estimate.basis is Basis.FIT
    assert estimate.mean == pytest.approx(LAW({"batch_size": 128}, Resources(2)) * 10_000, rel=0.1)


def test_with_few_points_the_nearest_configurations_answer() -> None:
    model = TrialCostModel(min_fit=8, neighbours=2)
    assert model.predict(Quantity.DURATION, {"batch_size": 64}) == Estimate(0.0, 0.0, 0.0)
    model.observe_run(0, {"batch_size": 64}, Resources(1), 100.0, full=True)
    one = model.predict(Quantity.DURATION, {"batch_size": 64})
    assert (one.basis, one.n) == (Basis.NEAREST, 1)
    # one value: a factor of 2 is one standard deviation, widened by sqrt(2) for the mean's own error
    assert one.high / 100.0 == pytest.approx(math.exp(1.6449 * math.log(2) * math.sqrt(2)), rel=1e-3)
    model.observe_run(1, {"batch_size": 256}, Resources(1), 300.0, full=True)
    model.observe_run(2, {"batch_size": 64}, Resources(4), 30.0, full=False)  # pruned: a run, not a duration
    assert model.count(Quantity.DURATION) == 2 and model.count(Quantity.RUN) == 3
    assert model.nearest(Quantity.DURATION, {"batch_size": 128}) == [100.0, 300.0]
    assert model.recent_median(Quantity.RUN) == 100.0


def test_a_running_trials_newer_progress_replaces_its_older() -> None:
    model = TrialCostModel()
    model.observe_progress(5, {"batch_size": 32}, Resources(1), 10.0, 100)
    model.observe_progress(5, {"batch_size": 32}, Resources(1), 30.0, 200)
    assert model.count(Quantity.PER_EXAMPLE) == 1
    assert model.nearest(Quantity.PER_EXAMPLE, {"batch_size": 32}) == [0.15]


def test_the_memory_model_reads_the_fits_upper_bound_once_it_has_one() -> None:
    rng = np.random.default_rng(3)
    memory = MemoryModel(margin=1.0)
    law = LogLinearLaw.power(2**20, batch_size=1.0)
    for _ in range(12):
        params = {"batch_size": int(2 ** rng.integers(4, 10))}
        memory.observe(params, int(law(params) * rng.lognormal(0.0, 0.05)))
    predicted = memory.model.predict(Quantity.MEMORY, {"batch_size": 2048})  # beyond what was seen: the fit's law
    assert predicted.basis is Basis.FIT
    assert memory.estimate({"batch_size": 2048}) == int(predicted.high)
    assert predicted.low < 2048 * 2**20 < predicted.high


def test_bad_settings_are_refused_with_the_rule() -> None:
    with pytest.raises(ValueError, match="min_fit=1.*need min_fit >= 2"):
        TrialCostModel(min_fit=1)
    with pytest.raises(ValueError, match="width=0: must be an int >= 1"):
        Resources(0)
    with pytest.raises(ValueError, match="need low <= mean <= high"):
        Estimate(2.0, 3.0, 4.0)


def _half_ended(rng: np.random.Generator, trials: int, sigma: float) -> tuple[list[float], float]:
    """Durations that no parameter explains (a lognormal of log-spread ``sigma``) and the moment half have ended."""
    durations = [float(rng.lognormal(math.log(100.0), sigma)) for _ in range(trials)]
    return durations, float(np.median(durations))


def test_running_trials_are_censored_points_so_the_short_ones_that_ended_first_do_not_bias_the_fit() -> None:
    """All trials start at once; at the median duration the short half has ended and the long half runs on. Fitted
    on the ended ones alone, a trial's expected duration was that of the short half (about 0.6 of the true mean);
    with each running trial's seconds so far as a lower bound on its duration (Tobit, by expectation
    maximisation), the fit recovers the whole distribution's mean and spread."""
    sigma, rng = 0.6, np.random.default_rng(52)
    durations, now = _half_ended(rng, 200, sigma)
    lrs = [float(10 ** rng.uniform(-4, -1)) for _ in durations]  # a parameter the duration does not depend on
    model = TrialCostModel()
    for number, (seconds, lr) in enumerate(zip(durations, lrs)):
        if seconds <= now:
            model.observe_run(number, {"lr": lr}, Resources(1), seconds, full=True)
        else:
            model.observe_running(number, {"lr": lr}, Resources(1), now)
    true_mean = 100.0 * math.exp(sigma**2 / 2)
    predicted = model.predict(Quantity.DURATION, {"lr": 1e-3})
    assert predicted.basis is Basis.FIT
    assert predicted.mean == pytest.approx(true_mean, rel=0.15)
    assert predicted.low <= 100.0 * math.exp(-1.2 * sigma) and 100.0 * math.exp(1.2 * sigma) <= predicted.high
    fit = model.fit(Quantity.DURATION)
    assert fit is not None and fit.law.spread == pytest.approx(sigma, rel=0.2)
    model.forget_running([])  # the running ones' runs were lost: the ended ones alone again
    assert model.predict(Quantity.DURATION, {"lr": 1e-3}).mean < 0.7 * true_mean
