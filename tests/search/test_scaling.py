"""Batch-size scaling analysis: steps-to-target, the McCandlish fit, bootstrap, regimes, LR rule, table."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from search.scaling.fit import (
    LRRuleFit,
    Regime,
    ScalingError,
    ScalingFit,
    TargetHit,
    TrialOutcome,
    bootstrap_b_crit,
    classify_regimes,
    conclusion,
    fit_mccandlish,
    lr_rule_fit,
    reached_points,
    regime_boundaries,
    scaling_efficiency,
    scaling_table,
    steps_to_target,
    validate_batch_sizes,
    write_scaling_table,
)

S_MIN, B_NOISE = 500.0, 100.0
SIZES = 2 ** np.arange(3, 11)  # 8 .. 1024


def synthetic_steps(rng: np.random.Generator, sizes: np.ndarray = SIZES, noise: float = 0.02) -> np.ndarray:
    """Steps to target drawn from the model with multiplicative log-normal noise."""
    return S_MIN * (1 + B_NOISE / sizes) * np.exp(rng.normal(0.0, noise, len(sizes)))


# --------------------------------------------------------------------------- steps_to_target

HISTORY = [
    (1, {"val_accuracy": 0.50, "steps": 100.0, "examples": 3200.0, "epoch_seconds": 2.0}),
    (2, {"val_accuracy": 0.80, "steps": 200.0, "examples": 6400.0, "epoch_seconds": 2.5}),
    (3, {"val_accuracy": 0.96, "steps": 300.0, "examples": 9600.0, "epoch_seconds": 3.0}),
    (4, {"val_accuracy": 0.97, "steps": 400.0, "examples": 12800.0, "epoch_seconds": 3.0}),
]


def test_steps_to_target_returns_the_first_report_reaching_it() -> None:
    hit = steps_to_target(HISTORY, "val_accuracy", 0.95, "max", time_key="epoch_seconds")
    assert hit == TargetHit(steps=300.0, examples=9600.0, seconds=7.5, report=3, value=0.96)


def test_steps_to_target_interpolates_between_reports_when_asked() -> None:
    hit = steps_to_target(HISTORY, "val_accuracy", 0.88, "max", time_key="epoch_seconds", interpolate=True)
    assert hit is not None
    assert hit.steps == pytest.approx(250.0)
    assert hit.examples == pytest.approx(8000.0)
    assert hit.seconds == pytest.approx(6.0)


def test_steps_to_target_min_mode_cumulative_clock_and_not_reached() -> None:
    history = [(i, {"loss": loss, "steps": 10.0 * i, "clock": 1.5 * i}) for i, loss in enumerate([3, 2, 1], 1)]
    hit = steps_to_target(history, "loss", 2.0, "min", examples_key=None, time_key="clock", time_is_cumulative=True)
    assert hit == TargetHit(steps=20.0, examples=None, seconds=3.0, report=2, value=2.0)
    assert steps_to_target(history, "loss", 0.5, "min", examples_key=None) is None
    assert steps_to_target([], "loss", 0.5, "min") is None


def test_steps_to_target_skips_reports_without_the_metric_and_rejects_a_misspelt_one() -> None:
    history = [(1, {"steps": 5.0, "examples": 5.0}), (2, {"acc": 0.9, "steps": 10.0, "examples": 20.0})]
    assert steps_to_target(history, "acc", 0.5, "max") == TargetHit(10.0, 20.0, None, 2, 0.9)
    with pytest.raises(ScalingError, match="'accuracy' never appears in the reports"):
        steps_to_target(history, "accuracy", 0.5, "max")
    with pytest.raises(ScalingError, match="mode: must be 'max' or 'min'"):
        steps_to_target(history, "acc", 0.5, "maximize")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the fit


def test_fit_is_exact_on_noiseless_data_and_the_derived_quantities_agree() -> None:
    fit = fit_mccandlish(SIZES, S_MIN * (1 + B_NOISE / SIZES))
    assert fit.s_min == pytest.approx(S_MIN, rel=1e-9)
    assert fit.b_noise == pytest.approx(B_NOISE, rel=1e-9)
    assert fit.e_min == pytest.approx(S_MIN * B_NOISE, rel=1e-9)
    assert fit.b_crit == pytest.approx(fit.e_min / fit.s_min)
    assert np.max(np.abs(fit.residuals)) < 1e-9
    assert fit.predict_examples(B_NOISE) == pytest.approx(2 * fit.e_min)  # E(B_crit) = 2 E_min
    assert fit.predict_steps(B_NOISE) == pytest.approx(2 * fit.s_min)  # S(B_crit) = 2 S_min
    np.testing.assert_allclose(fit.predict_examples(SIZES), SIZES * fit.predict_steps(SIZES))


def test_fit_recovers_s_min_and_b_noise_within_5_percent_from_noisy_data() -> None:
    fit = fit_mccandlish(SIZES, synthetic_steps(np.random.default_rng(0)))
    assert fit.s_min == pytest.approx(S_MIN, rel=0.05)
    assert fit.b_noise == pytest.approx(B_NOISE, rel=0.05)
    assert fit.e_min == pytest.approx(S_MIN * B_NOISE, rel=0.05)


def test_fit_accuracy_over_many_draws() -> None:
    """2% multiplicative noise, 8 batch sizes, 200 seeded draws.

    Measured over 1000 draws: S_min always within 5% (rms error 1.4%), B_noise
    within 5% in 96% of draws (rms 2.4%, median 1.7%), no bias beyond 0.2%.
    """
    rng = np.random.default_rng(7)
    rel = np.array(
        [
            (fit.s_min / S_MIN - 1, fit.b_noise / B_NOISE - 1)
            for fit in (fit_mccandlish(SIZES, synthetic_steps(rng)) for _ in range(200))
        ]
    )
    within = (np.abs(rel) < 0.05).mean(axis=0)
    assert within[0] == 1.0
    assert within[1] >= 0.93
    assert np.median(np.abs(rel[:, 1])) < 0.025
    assert np.all(np.abs(rel.mean(axis=0)) < 0.01)


def test_fit_accepts_repeated_batch_sizes_as_extra_measurements() -> None:
    sizes = np.repeat(SIZES, 3)
    fit = fit_mccandlish(sizes, synthetic_steps(np.random.default_rng(1), sizes, noise=0.05))
    assert fit.b_noise == pytest.approx(B_NOISE, rel=0.1)
    assert len(fit.residuals) == len(sizes)


def test_fit_edge_cases_perfect_scaling_throughout_and_flat_steps() -> None:
    halving = fit_mccandlish([8, 16, 32, 64], [8000, 4000, 2000, 1000])
    assert halving.s_min == pytest.approx(0.0, abs=1e-9) and math.isinf(halving.b_noise)
    assert halving.e_min == pytest.approx(64000)
    assert halving.predict_steps(128) == pytest.approx(500)
    flat = fit_mccandlish([8, 16, 32], [300, 300, 300])
    assert flat.b_noise == pytest.approx(0.0, abs=1e-9) and flat.s_min == pytest.approx(300)


@pytest.mark.parametrize(
    ("sizes", "steps", "message"),
    [
        ([8, 16], [10, 5], "at least 3 distinct batch sizes"),
        ([8, 8, 16, 16], [10, 10, 5, 5], "at least 3 distinct batch sizes"),
        ([8, 16, 32], [10, float("nan"), 4], r"steps\[1\]: must be a finite number > 0"),
        ([8, 16, 32], [10, 0, 4], r"steps\[1\]"),
        ([8, -16, 32], [10, 6, 4], r"batch_sizes\[1\]"),
        ([8, 16, 32], [10, 6], "one value per batch size"),
    ],
)
def test_fit_refuses_ill_posed_input(sizes: list[float], steps: list[float], message: str) -> None:
    with pytest.raises(ScalingError, match=message):
        fit_mccandlish(sizes, steps)


# --------------------------------------------------------------------------- bootstrap


def test_bootstrap_interval_contains_the_true_b_crit() -> None:
    steps = synthetic_steps(np.random.default_rng(3), noise=0.03)
    fit = fit_mccandlish(SIZES, steps)
    low, high = bootstrap_b_crit(SIZES, steps, seed=11)
    assert low < B_NOISE < high
    assert low <= fit.b_crit <= high
    assert bootstrap_b_crit(SIZES, steps, seed=11) == (low, high)  # seeded: reproducible
    low_p, high_p = bootstrap_b_crit(SIZES, steps, n_boot=300, seed=np.random.default_rng(11), method="pairs")
    assert low_p < B_NOISE < high_p


def test_bootstrap_coverage_over_repeated_experiments() -> None:
    """Nominal 90%; small-sample percentile intervals undercover a little (measured ~0.8 over 100 draws)."""
    rng = np.random.default_rng(2024)
    covered = 0
    for _ in range(30):
        low, high = bootstrap_b_crit(SIZES, synthetic_steps(rng, noise=0.03), n_boot=100, seed=rng)
        covered += low <= B_NOISE <= high
    assert covered >= 21


def test_bootstrap_handles_degenerate_resamples_and_unbounded_fits() -> None:
    # pairs: with 3 distinct sizes most resamples have < 3 distinct and are redrawn; the
    # rest hold all three exact points of S = 500 (1 + 16/B), so every refit gives 16
    low, high = bootstrap_b_crit([8, 16, 32], [1500, 1000, 750], n_boot=50, seed=0, method="pairs")
    assert low == pytest.approx(16) and high == pytest.approx(16)
    # perfect halving: S_min = 0 -> B_crit = inf in every resample
    low, high = bootstrap_b_crit([8, 16, 32, 64], [8000, 4000, 2000, 1000], n_boot=20, seed=0)
    assert math.isinf(high)
    with pytest.raises(ScalingError, match="ci: must be between 0 and 1"):
        bootstrap_b_crit(SIZES, synthetic_steps(np.random.default_rng(0)), seed=0, ci=90)


# --------------------------------------------------------------------------- regimes


def test_efficiency_and_regimes_on_a_known_curve() -> None:
    fit = ScalingFit.from_coefficients(s_min=100.0, e_min=100.0 * 64)  # B_noise = 64
    # r(B) = 1 / (1 + B / B_noise)
    for b in (4, 16, 64, 256, 1024):
        assert scaling_efficiency(fit, b) == pytest.approx(1 / (1 + b / 64))
    assert regime_boundaries(fit) == pytest.approx((16.0, 256.0))
    regimes = classify_regimes(fit, [4, 16, 17, 64, 255, 256, 1024])
    assert regimes == {
        4: Regime.PERFECT_SCALING,
        16: Regime.PERFECT_SCALING,  # r = 0.8 exactly: S(32)/S(16) = 0.6
        17: Regime.DIMINISHING_RETURNS,
        64: Regime.DIMINISHING_RETURNS,
        255: Regime.DIMINISHING_RETURNS,
        256: Regime.MAXIMAL_DATA_PARALLELISM,  # r = 0.2: doubling saves 10%
        1024: Regime.MAXIMAL_DATA_PARALLELISM,
    }
    assert fit.predict_steps(32) / fit.predict_steps(16) == pytest.approx(0.6)
    with pytest.raises(ScalingError, match="0 < maximal < perfect < 1"):
        classify_regimes(fit, [8], perfect=0.2, maximal=0.8)


# --------------------------------------------------------------------------- LR rule


@pytest.mark.parametrize("alpha", [0.5, 0.8, 1.0])
def test_lr_rule_fit_recovers_a_known_exponent(alpha: float) -> None:
    rng = np.random.default_rng(5)
    lrs = 0.01 * (SIZES / 8) ** alpha * np.exp(rng.normal(0, 0.05, len(SIZES)))
    fit = lr_rule_fit(SIZES, lrs)
    assert fit.alpha == pytest.approx(alpha, abs=0.03)
    assert 0 < fit.alpha_stderr < 0.03
    assert fit.anchor_batch_size == 8 and fit.anchor_lr == pytest.approx(lrs[0])
    assert fit.linear_rule(64) == pytest.approx(lrs[0] * 8)
    assert fit.sqrt_rule(32) == pytest.approx(lrs[0] * 2)
    assert fit.closer_rule == ("sqrt" if alpha < 0.75 else "linear")


def test_lr_rule_fit_refuses_bad_input() -> None:
    with pytest.raises(ScalingError, match=r"best_lrs\[1\]: must be a finite number > 0"):
        lr_rule_fit([8, 16, 32], [0.1, -0.2, 0.4])
    with pytest.raises(ScalingError, match="at least 2 distinct"):
        lr_rule_fit([8, 8], [0.1, 0.1])


# --------------------------------------------------------------------------- conclusion


def test_conclusion_names_the_boundaries_b_crit_and_the_lr_exponent() -> None:
    fit = ScalingFit.from_coefficients(s_min=500.0, e_min=500.0 * 100)
    regimes = classify_regimes(fit, [8, 64, 1024])
    lr_fit = LRRuleFit(0.52, 1.0, 0.04, (8.0, 64.0, 1024.0), (0.1, 0.3, 1.2), 8.0, 0.1)
    text = conclusion(fit, regimes, lr_fit, b_crit_interval=(88.0, 115.0), not_reached=[2048])
    assert "Up to B≈25, doubling the batch nearly halves the steps" in text
    assert "beyond B≈400 it stops paying" in text
    assert "B_crit≈100, 90% bootstrap interval 88–115" in text
    assert "S_min≈500" in text and "E_min≈50,000" in text
    assert "8 is in perfect scaling; 64 is in diminishing returns; 1024 is in maximal data parallelism" in text
    assert "No trial reached the target at B=2048" in text
    assert "grew like B^0.52 ± 0.04, closer to the square-root rule" in text
    assert "\n" not in text


def test_conclusion_for_unbounded_and_flat_fits() -> None:
    halving = ScalingFit.from_coefficients(0.0, 64000.0)
    assert "beyond the largest one tried" in conclusion(halving, classify_regimes(halving, [8, 16, 32]))
    flat = ScalingFit.from_coefficients(300.0, 0.0)
    assert "never reduced the steps" in conclusion(flat, classify_regimes(flat, [8, 16, 32]))


# --------------------------------------------------------------------------- validate_batch_sizes


def test_validate_batch_sizes_sorts_and_returns_builtin_ints() -> None:
    assert validate_batch_sizes([64, np.int64(8), 16]) == (8, 16, 64)
    assert all(type(b) is int for b in validate_batch_sizes([64, np.int64(8), 16]))


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([8, 16, 0], r"batch_sizes\[2\]: must be a positive integer \(>= 1\), got 0"),
        ([8, -16, 32], r"batch_sizes\[1\]: must be a positive integer \(>= 1\), got -16"),
        ([8, 16.0, 32], r"batch_sizes\[1\]: must be a positive integer, got 16.0 \(float\)"),
        ([8, True, 32], r"batch_sizes\[1\]: must be a positive integer, got True \(bool\)"),
        ([8, "16", 32], r"batch_sizes\[1\]: must be a positive integer, got '16' \(str\)"),
        ([8, 16, 32, 16], r"batch_sizes\[3\]: 16 already appears at batch_sizes\[1\]"),
        ([8, 16], r"batch_sizes: a scaling fit needs at least 3 batch sizes, got 2"),
        ("8,16,32", r"batch_sizes: must be a list of positive integers"),
    ],
)
def test_validate_batch_sizes_errors_name_the_value_and_the_rule(values: object, message: str) -> None:
    with pytest.raises(ScalingError, match=message) as info:
        validate_batch_sizes(values)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


# --------------------------------------------------------------------------- the table


def test_table_keeps_unreached_batch_sizes_and_picks_the_fastest_trial(tmp_path) -> None:
    def hit(steps: float, seconds: float | None = None, examples: float | None = None) -> TargetHit:
        return TargetHit(steps=steps, examples=examples, seconds=seconds, report=1, value=0.96)

    outcomes = [
        TrialOutcome(8, 0.05, hit(900, 9.0, 7200), trial=0),
        TrialOutcome(8, 0.10, hit(800, 8.0, 6400), trial=1),
        TrialOutcome(16, 0.10, hit(500, 5.0), trial=2),  # examples fall back to steps * B
        TrialOutcome(32, 0.20, hit(350, 4.0), trial=3),
        TrialOutcome(64, 0.40, None, trial=4),
    ]
    fit = fit_mccandlish([8, 16, 32], [800, 500, 350])
    regimes = classify_regimes(fit, [8, 16, 32])
    table = scaling_table(outcomes, [8, 16, 32, 64, 128], fit=fit, regimes=regimes)
    assert list(table["batch_size"]) == [8, 16, 32, 64, 128]
    assert list(table["status"]) == ["reached", "reached", "reached", "not reached", "no trials"]
    assert list(table["trials"]) == [2, 1, 1, 1, 0]
    row8 = table.iloc[0]
    assert (row8["best_trial"], row8["steps_to_target"], row8["examples_to_target"]) == (1, 800, 6400)
    assert (row8["wall_seconds"], row8["best_lr"]) == (8.0, 0.10)
    assert table.iloc[1]["examples_to_target"] == 500 * 16
    assert table.iloc[3]["regime"] == "" and math.isnan(table.iloc[3]["steps_to_target"])
    assert table.iloc[0]["regime"] == regimes[8].value
    assert reached_points(table) == ([8, 16, 32], [800.0, 500.0, 350.0])

    path = write_scaling_table(table, tmp_path / "out" / "scaling.csv")
    back = pd.read_csv(path)
    assert len(back) == 5 and list(back["status"])[3:] == ["not reached", "no trials"]
