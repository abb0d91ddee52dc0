"""The goodput model: the step-time fit (with AdaptDL's priors), statistical efficiency, AdaScale's gain."""

from __future__ import annotations

import math

import pytest

from cluster.goodput import Goodput, StepModel, StepTime, adascale_gain, efficiency, fit_step_model

TRUE = StepModel(alpha_c=0.01, beta_c=0.002, alpha_n=0.03, beta_n=0.005)


def measured(widths: list[int], local_batches: list[float]) -> list[StepTime]:
    return [StepTime(w, m, TRUE.step_seconds(w, m)) for w in widths for m in local_batches]


def test_the_fit_recovers_the_model_when_the_measurements_show_every_part() -> None:
    fit = fit_step_model(measured([1, 2, 4], [16.0, 64.0]))
    assert fit.alpha_c == pytest.approx(TRUE.alpha_c)
    assert fit.beta_c == pytest.approx(TRUE.beta_c)
    assert fit.alpha_n == pytest.approx(TRUE.alpha_n)
    assert fit.beta_n == pytest.approx(TRUE.beta_n)


def test_one_width_and_one_batch_seen_means_perfect_scaling_until_measured() -> None:
    """The optimistic prior: only width 1 and one batch seen -> no all-reduce, compute in proportion to the batch."""
    fit = fit_step_model([StepTime(1, 32.0, 0.1)])
    assert (fit.alpha_c, fit.alpha_n, fit.beta_n) == (0.0, 0.0, 0.0)
    assert fit.step_seconds(1, 32.0) == pytest.approx(0.1)
    assert fit.throughput(4, 32.0) == pytest.approx(4 * 32 / 0.1)


def test_width_two_seen_gives_the_all_reduce_constant_but_no_retrogression() -> None:
    fit = fit_step_model(measured([1, 2], [16.0, 64.0]))
    assert fit.alpha_n == pytest.approx(TRUE.alpha_n)
    assert fit.beta_n == 0.0


def test_a_noisy_fit_keeps_every_term_non_negative() -> None:
    points = [StepTime(1, 32.0, 0.10), StepTime(1, 64.0, 0.09), StepTime(2, 32.0, 0.095)]
    fit = fit_step_model(points)
    assert min(fit.alpha_c, fit.beta_c, fit.alpha_n, fit.beta_n) >= 0.0


def test_efficiency_and_adascale_follow_the_noise_scale() -> None:
    assert efficiency(64, 64, 100.0) == 1.0
    assert efficiency(128, 64, 64.0) == pytest.approx(128 / 192)
    assert efficiency(128, 64, math.inf) == 1.0
    assert efficiency(128, 64, 0.0) == pytest.approx(0.5)
    assert adascale_gain(2.0, 64, math.inf) == pytest.approx(2.0)  # noise-dominated: the linear rule
    assert adascale_gain(2.0, 64, 0.0) == pytest.approx(1.0)  # no noise: keep the rate
    assert adascale_gain(2.0, 64, 64.0) == pytest.approx((1 + 1) / (0.5 + 1))  # (s+g2)/(s/S+g2), s/g2 = 1


def test_goodput_in_fixed_mode_is_throughput_and_in_grow_mode_pays_the_efficiency() -> None:
    fixed = Goodput(TRUE, base_batch=64)
    assert fixed(2) == pytest.approx(TRUE.throughput(2, 64))
    grown = Goodput(TRUE, base_batch=64, grow=True, b_noise=64.0)
    assert grown.batch(4) == 256
    assert grown(4) == pytest.approx(TRUE.throughput(4, 256) * 128 / 320)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: StepTime(0, 1.0, 1.0), "width=0"),
        (lambda: StepTime(1, 1.0, math.nan), "seconds=nan"),
        (lambda: fit_step_model([]), "at least one"),
        (lambda: efficiency(0, 64, 1.0), "batch=0"),
        (lambda: efficiency(64, 64, -1.0), "b_noise=-1.0"),
    ],
)
def test_bad_inputs_are_refused_naming_the_value(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]


def test_adaptdl_prior_takes_half_of_a_step_measured_at_one_batch_as_fixed() -> None:
    """One per-replica batch measured: 0 fixed by default (speedup 2 at width 2 with a fixed global batch), half the
    step with AdaptDL's prior (speedup 4/3), which the slots taken from waiting trials are weighed by."""
    measured = [StepTime(1, 128.0, 0.2)]
    assert fit_step_model(measured).throughput(2, 128.0) == pytest.approx(2 * 128.0 / 0.2)
    half = fit_step_model(measured, fixed_share=0.5)
    assert half.alpha_c == pytest.approx(0.1)
    assert half.throughput(2, 128.0) / half.throughput(1, 128.0) == pytest.approx(4 / 3)
