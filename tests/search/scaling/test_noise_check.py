"""The measured noise scale set against the fitted B_crit: run means, the ratio, its interval and the verdict."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import optuna
import pytest

from search.scaling.noise_check import median_interval, noise_prediction, run_means
from search.scaling.noise_plot import plot_noise_vs_b_crit
from search.scaling.sweep import BATCH, ScalingSpec, TargetGoal, analyze_sweep
from search.scaling.synthetic import SyntheticScaling, synthetic_history
from search.store.records import Attr, encode_history


def test_run_means_average_the_finite_readings_and_count_the_rest() -> None:
    readings = {
        64: [(10, 100.0, 50.0, 200.0), (20, 300.0, 100.0, math.nan), (30, math.inf, 400.0, math.inf)],
        128: [(5, math.inf, 900.0, math.inf)],  # above range only: no run mean
    }
    runs = run_means(readings)
    assert list(runs) == [64]
    run = runs[64]
    assert run.mean == pytest.approx(200.0) and run.low == pytest.approx(75.0)
    assert math.isinf(run.high)  # one reading's interval had no upper end
    assert (run.readings, run.left_out) == (2, 1)


def test_the_ratio_its_interval_and_the_factor_of_two_verdict() -> None:
    means = {16: 95.0, 32: 90.0, 64: 105.0, 128: 110.0, 256: 100.0}
    readings = {b: [(1, v, v / 2, v * 2)] for b, v in means.items()}
    p = noise_prediction(readings, b_crit=150.0, b_crit_interval=(120.0, 190.0))
    assert p is not None
    assert p.b_simple == pytest.approx(100.0)  # the median of the run means
    low, high = p.b_simple_interval
    assert (low, high) == (90.0, 110.0)  # 5 runs: the smallest and the largest cover the median with 94%
    assert p.ratio == pytest.approx(1.5) and p.within
    assert p.ratio_interval == pytest.approx((120.0 / high, 190.0 / low))
    assert p.settled is (120.0 / high >= 0.5 and 190.0 / low <= 2.0)
    text = p.sentence()
    assert "B_crit / B_simple = 1.50" in text and "is within a factor of 2" in text
    far = noise_prediction(readings, b_crit=600.0, b_crit_interval=(500.0, 800.0))
    assert far is not None and not far.within and far.settled
    assert "is not within a factor of 2" in far.sentence() and "intervals settle it" in far.sentence()
    open_ = noise_prediction(readings, b_crit=210.0, b_crit_interval=(60.0, math.inf))
    assert open_ is not None and not open_.within and not open_.settled
    assert "leave it open" in open_.sentence()
    assert noise_prediction(readings, b_crit=math.inf, b_crit_interval=(60.0, math.inf)) is None
    assert noise_prediction({64: [(1, math.inf, 9.0, math.inf)]}, 100.0, (50.0, 200.0)) is None


def test_the_figure_is_written(tmp_path: Path) -> None:
    readings = {64: [(1, 90.0, 45.0, math.nan)], 128: [(1, 110.0, 60.0, 200.0)]}
    p = noise_prediction(readings, b_crit=150.0, b_crit_interval=(0.0, math.inf))
    assert p is not None
    path = plot_noise_vs_b_crit(tmp_path / "n.png", p)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


def noisy_study(truth: SyntheticScaling, sizes: list[int], b_simple: float, seed: int) -> optuna.Study:
    """A finished sweep with a known scaling law whose reports carry b_simple readings around ``b_simple``."""
    rng = np.random.default_rng(seed)
    study = optuna.create_study(direction="minimize")
    dists = {
        BATCH: optuna.distributions.CategoricalDistribution(tuple(sizes)),
        "lr": optuna.distributions.FloatDistribution(1e-4, 10.0, log=True),
    }
    for b in sizes:
        history = synthetic_history(truth, b, truth.steps(b) * float(np.exp(0.05 * rng.standard_normal())))
        for _step, metrics in history:
            value = b_simple * float(np.exp(0.2 * rng.standard_normal()))
            metrics.update(b_simple=value, b_simple_lo=value * 0.6, b_simple_hi=value * 1.7)
        trial = optuna.trial.create_trial(
            params={BATCH: b, "lr": 0.01 * b / 8},
            distributions=dists,
            value=history[-1][1]["steps"],
            user_attrs={Attr.HISTORY: encode_history(history)},
        )
        study.add_trial(trial)
    return study


@pytest.mark.slow
@pytest.mark.parametrize(("b_simple", "within"), [(64.0, True), (400.0, False)])
def test_the_sweep_conclusion_says_whether_the_noise_scale_predicts_b_crit(
    tmp_path: Path, b_simple: float, within: bool
) -> None:
    truth, sizes = SyntheticScaling(b_noise=64.0), [8, 16, 32, 64, 128, 256]
    spec = ScalingSpec(batch_sizes=tuple(sizes), target=truth.target, trials_per_batch=1, bootstrap=200)
    goal = TargetGoal("val_accuracy", truth.target, "max")
    result = analyze_sweep(noisy_study(truth, sizes, b_simple, seed=3), spec, goal, tmp_path / "scaling", seed=0)
    assert "noise_vs_b_crit.png" in {p.name for p in result.plots}
    text = result.conclusion
    assert "mean over each batch size's best run up to the target" in text and "their median" in text
    ratio = float(text.split("B_crit / B_simple = ", 1)[1].split(" ", 1)[0])
    b_crit = float(text.split("The critical batch size is B_crit≈", 1)[1].split(" ", 1)[0].replace(",", ""))
    assert ratio == pytest.approx(b_crit / b_simple, rel=0.15)  # readings scatter 20% around b_simple
    assert (f"is {'within' if within else 'not within'} a factor of 2 of B_crit" in text) is True


def test_one_climbing_run_does_not_carry_the_noise_scale() -> None:
    """Issue 53: a batch size whose readings climb towards 10^4 pulled the mean of the run means up enough to
    turn "not within 2x" into "within"; the median of the run means is not moved by it."""
    means = {64: 500.0, 256: 600.0, 1024: 650.0, 4096: 700.0, 16384: 9000.0}
    readings = {b: [(1, v, v / 2, v * 2)] for b, v in means.items()}
    p = noise_prediction(readings, b_crit=1400.0, b_crit_interval=(1300.0, 1500.0))
    assert p is not None and p.b_simple == 650.0 and p.b_simple_mean == pytest.approx(2290.0)
    assert p.ratio == pytest.approx(1400 / 650) and not p.within
    assert "their median 650" in p.sentence() and "not the mean, 2,290" in p.sentence()


@pytest.mark.parametrize(("n", "expected"), [(4, (0.0, math.inf)), (6, (1.0, 6.0)), (9, (2.0, 8.0)), (20, (6.0, 15.0))])
def test_the_median_interval_is_the_order_statistics_with_binomial_coverage(
    n: int, expected: tuple[float, float]
) -> None:
    assert median_interval([float(v) for v in range(n, 0, -1)], 0.9) == expected


def test_too_few_runs_to_bound_the_median_are_said_so() -> None:
    readings = {b: [(1, v, v / 2, v * 2)] for b, v in {64: 145.0, 128: 185.0, 256: 203.0}.items()}
    p = noise_prediction(readings, b_crit=272.0, b_crit_interval=(190.0, 408.0))
    assert p is not None and p.b_simple_interval == (0.0, math.inf) and not p.settled
    assert "their median 185 (3 run(s) are too few to bound the median at 90%;" in p.sentence()
