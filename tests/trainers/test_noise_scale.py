"""The gradient noise scale estimator, on least-squares problems whose |G|² and tr(Σ) are known exactly."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from torch import nn

from trainers.noise_scale import (
    NoiseScaleEstimator,
    fieller,
    grad_sq_norms_two_batch_sizes,
    measurement_batch,
    t_quantile,
)


class Population:
    """y = X w* + noise, N examples treated as the population; per-example loss ½(x·w − y)².

    At a fixed w != w*, the per-example gradients g_i = (x_i·w − y_i) x_i have
    mean G and covariance Σ computed exactly over the N examples; a batch
    drawn with replacement has i.i.d. gradients with exactly that mean and
    covariance.
    """

    def __init__(self, n: int = 20_000, d: int = 5, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, d, generator=g, dtype=torch.float64)
        w_star = torch.randn(d, generator=g, dtype=torch.float64)
        self.y = self.x @ w_star + 0.5 * torch.randn(n, generator=g, dtype=torch.float64)
        self.w = w_star + 0.3 * torch.randn(d, generator=g, dtype=torch.float64)
        self.per_example = (self.x @ self.w - self.y)[:, None] * self.x
        self.G = self.per_example.mean(0)
        self.g_sq = float(self.G @ self.G)
        self.trace_sigma = float(((self.per_example - self.G) ** 2).sum(1).mean())
        self.b_simple = self.trace_sigma / self.g_sq

    def model(self) -> nn.Module:
        model = nn.Linear(len(self.w), 1, bias=False).double()
        with torch.no_grad():
            model.weight.copy_(self.w[None])
        return model


class LeastSquares:
    """N examples in d = 4 dimensions, at a w placed so that tr(Σ)/|G|² is exactly ``b_simple``.

    With ``w = w_ls + δu`` (``w_ls`` the least-squares fit, ``u`` a unit
    direction), ``G = δ XᵀX u / N`` and ``tr(Σ) = mean|g_i|² − |G|²`` is a
    quadratic in ``δ``; ``tr(Σ) = b_simple |G|²`` is solved for ``δ > 0``.
    ``Σ`` is the covariance over the N examples (divided by N).
    """

    def __init__(self, n: int, b_simple: float, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n, 4, generator=g, dtype=torch.float64)
        w_true = torch.randn(4, generator=g, dtype=torch.float64)
        y = x @ w_true + 0.5 * torch.randn(n, generator=g, dtype=torch.float64)
        w_ls = torch.linalg.lstsq(x, y[:, None]).solution[:, 0]
        u = torch.randn(4, generator=g, dtype=torch.float64)
        u /= u.norm()
        r0, z, q = x @ w_ls - y, x @ u, (x * x).sum(1)
        h = float(((x.T @ z) / n).norm() ** 2)  # |G|² = δ² h
        m0, m1, m2 = (float((r0**2 * q).mean()), float((r0 * z * q).mean()), float((z**2 * q).mean()))
        a = h * (b_simple + 1) - m2  # a δ² - 2 m1 δ - m0 = 0
        delta = (m1 + math.sqrt(m1 * m1 + a * m0)) / a
        self.n = n
        self.per_example = (x @ (w_ls + delta * u) - y)[:, None] * x
        mean = self.per_example.mean(0)
        self.g_sq = float(mean @ mean)
        self.trace_sigma = float(((self.per_example - mean) ** 2).sum(1).mean())
        self.b_simple = self.trace_sigma / self.g_sq

    def feed(self, est: NoiseScaleEstimator, batch: int, n_micro: int, epochs: int, seed: int) -> None:
        """Train-loop sampling: each epoch a permutation cut into batches of ``batch``, each into micro-batches."""
        gen = torch.Generator().manual_seed(seed)
        b_small = batch // n_micro
        for _ in range(epochs):
            perm = torch.randperm(self.n, generator=gen)
            micro = self.per_example[perm].reshape(self.n // batch, n_micro, b_small, -1).mean(2)
            small, big = (micro**2).sum(-1).mean(-1), (micro.mean(1) ** 2).sum(-1)
            for s, b in zip(small.tolist(), big.tolist(), strict=True):
                est.update(s, b, b_small, batch)


def half_mse(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return 0.5 * ((out.squeeze(-1) - y) ** 2).mean()


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """Small tensors: one thread is ~15x faster than two on a loaded machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def population() -> Population:
    return Population()


def test_population_has_a_moderate_noise_scale(population: Population) -> None:
    assert 5 < population.b_simple < 20  # between b_small and b_big below: both norms informative


@pytest.mark.parametrize("target", [10, 1_000, 100_000])
def test_least_squares_problem_has_the_noise_scale_asked_for(target: int) -> None:
    assert LeastSquares(4096, target).b_simple == pytest.approx(target, rel=1e-9)


@pytest.mark.parametrize("population", [None, 1000])
def test_estimator_is_exact_on_expected_norms(population: int | None) -> None:
    """E|G_b|² = |G|² + tr(Σ) u(b), u(b) = (N - b)/((N - 1) b) or 1/b: the expected norms give the truth back."""
    g_sq, trace = 0.4, 3.7
    est = NoiseScaleEstimator(population=population)

    def u(b: int) -> float:
        return 1 / b if population is None else (population - b) / ((population - 1) * b)

    for b_small, b_big in [(8, 64), (4, 32), (16, 17)]:
        est.update(g_sq + trace * u(b_small), g_sq + trace * u(b_big), b_small, b_big)
    reading = est.estimate()
    assert (est.updates, reading.measurements) == (3, 3)
    assert reading.g_sq == pytest.approx(g_sq) and reading.trace_sigma == pytest.approx(trace)
    assert reading.low == pytest.approx(trace / g_sq) == reading.high == pytest.approx(reading.b_simple)
    assert not reading.above_range


def test_estimator_empty_one_measurement_and_metrics() -> None:
    est = NoiseScaleEstimator(population=100)
    assert math.isnan(est.b_simple) and math.isnan(est.g_sq) and est.estimate().metrics() == {}
    est.update(1.2, 1.0, 1, 2)
    assert math.isnan(est.b_simple) and est.estimate().metrics() == {}  # an interval needs a spread: 2 measurements
    assert est.g_sq == pytest.approx((99 * 1.0 - 49 * 1.2) / 50)  # u(1) = 1, u(2) = 49/99
    est.update(1.3, 1.0, 1, 2)
    metrics = est.estimate().metrics()
    assert set(metrics) == {"b_simple", "b_simple_lo", "b_simple_hi", "b_simple_limit", "b_simple_above_range"}
    assert metrics["b_simple_lo"] <= metrics["b_simple"] <= metrics["b_simple_hi"]


def test_denominator_not_significantly_positive_is_above_range() -> None:
    est = NoiseScaleEstimator()
    for g_small_sq, g_big_sq in [(2.0, 0.1), (2.1, 0.3), (1.9, 0.2)]:  # |G|² estimates all negative
        est.update(g_small_sq, g_big_sq, 1, 2)
    reading = est.estimate()
    assert reading.above_range and reading.b_simple == math.inf == reading.high
    expected = {"b_simple_lo": reading.low, "b_simple_limit": reading.limit, "b_simple_above_range": 1.0}
    assert reading.metrics() == expected and reading.low >= 0


def test_fieller_interval() -> None:
    t = t_quantile(0.9, 9)
    low, ratio, high = fieller(10.0, 2.0, 1.0, 0.04, 0.0, t)  # den 10 sd from 0: bounded, around 5
    assert low < ratio == 5.0 < high and high - ratio > ratio - low  # skewed upwards, as a ratio is
    low, ratio, high = fieller(10.0, 0.2, 1.0, 0.04, 0.0, t)  # den 1 sd from 0: unbounded
    assert ratio == high == math.inf and 0 < low < 10.0 / (0.2 + t * 0.2)
    assert fieller(0.1, 0.2, 1.0, 0.04, 0.0, t) == (0.0, math.inf, math.inf)  # num not significant either


def test_t_quantile_matches_tables() -> None:
    assert t_quantile(0.9, 1) == pytest.approx(6.3138, abs=1e-4)
    assert t_quantile(0.9, 2) == pytest.approx(2.9200, abs=1e-4)
    assert t_quantile(0.95, 5) == pytest.approx(2.5706, abs=1e-4)
    assert t_quantile(0.9, 30) == pytest.approx(1.6973, abs=1e-4)
    assert t_quantile(0.99, 100) == pytest.approx(2.6259, abs=1e-4)
    assert t_quantile(0.9, 10**6) == pytest.approx(1.6449, abs=1e-4)


def test_window_keeps_the_last_examples_and_at_least_the_minimum() -> None:
    est = NoiseScaleEstimator(window=100, min_measurements=3)
    for at in range(0, 1000, 10):
        est.update(2.0, 1.0, 4, 10, at=at)
    assert est.updates == 100 and est.measurements == 10  # at 900..990: the last 100 examples
    sparse = NoiseScaleEstimator(window=100, min_measurements=3)
    for at in range(0, 5000, 1000):
        sparse.update(2.0, 1.0, 4, 10, at=at)
    assert sparse.measurements == 3


def test_estimator_state_round_trips_and_old_checkpoints_start_empty() -> None:
    est = NoiseScaleEstimator(population=500, window=64)
    for k in range(10):
        est.update(2.0 + k % 3, 1.0, 4, 32)
    again = NoiseScaleEstimator(population=500, window=64)
    again.load_state_dict(est.state_dict())
    assert again.estimate() == est.estimate() and again.updates == est.updates == 10
    old = NoiseScaleEstimator(population=500)
    old.load_state_dict({"ema": 0.95, "g_sq_raw": 1.0, "trace_raw": 2.0, "count": 3.0})  # format 1
    assert old.updates == 0 and math.isnan(old.b_simple)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"b_small": 0}, "b_small: must be an integer >= 1"),
        ({"b_big": 8}, r"b_big: must be an integer > b_small \(8\)"),
        ({"b_big": 2000}, r"b_big: must be <= population \(1000\)"),
        ({"g_small_sq": float("nan")}, "g_small_sq: must be a finite squared norm"),
        ({"g_big_sq": -1.0}, "g_big_sq: must be a finite squared norm"),
        ({"at": -1}, "at: must be an integer >= the previous"),
    ],
)
def test_estimator_update_refuses_bad_input(kwargs: dict, message: str) -> None:
    args = {"g_small_sq": 2.0, "g_big_sq": 1.0, "b_small": 8, "b_big": 64, **kwargs}
    with pytest.raises(ValueError, match=message):
        NoiseScaleEstimator(population=1000).update(**args)


def test_estimator_refuses_measurements_out_of_order() -> None:
    est = NoiseScaleEstimator()
    est.update(2.0, 1.0, 8, 64, at=100)
    with pytest.raises(ValueError, match=r"at: must be an integer >= the previous measurement's \(100\)"):
        est.update(2.0, 1.0, 8, 64, at=99)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"population": 1}, "population: must be an integer >= 2"),
        ({"window": 0}, "window: must be an integer >= 1"),
        ({"confidence": 1.0}, r"confidence: must be a number in \(0, 1\)"),
        ({"confidence": True}, r"confidence: must be a number in \(0, 1\)"),
        ({"min_measurements": 1}, "min_measurements: must be an integer >= 2"),
    ],
)
def test_estimator_refuses_bad_settings(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        NoiseScaleEstimator(**kwargs)


# Coverage under the loop's own defaults, through measurement_batch: tests/trainers/test_noise_scale_defaults.py.


def test_finite_population_correction() -> None:
    """Without it, B_simple tends to tr(Σ) N/(N-1) / (|G|² - tr(Σ)/(N-1)): 1.32x at 1,000 of N = 4096."""
    problem = LeastSquares(4096, 1_000)
    corrected, naive = NoiseScaleEstimator(population=4096), NoiseScaleEstimator()
    for est in (corrected, naive):
        problem.feed(est, 1024, 4, epochs=500, seed=5)  # the same 2,000 measurements
    n, truth = problem.n, problem.b_simple
    biased = problem.trace_sigma * n / (n - 1) / (problem.g_sq - problem.trace_sigma / (n - 1))
    assert biased / truth == pytest.approx(1.32, abs=0.01)
    assert corrected.b_simple == pytest.approx(truth, rel=0.08)
    assert naive.b_simple == pytest.approx(biased, rel=0.08)
    reading = corrected.estimate()
    assert reading.low <= truth <= reading.high
    assert not naive.estimate().low <= truth <= naive.estimate().high


def test_window_follows_a_change_within_a_window() -> None:
    """True B_simple jumps from 10 to 1,000 after 20 epochs; one window later the estimate has followed.

    The old per-step EMA (decay 0.95) and any all-history average lag far behind.
    """
    before, after = LeastSquares(2048, 10), LeastSquares(2048, 1_000)
    windowed = NoiseScaleEstimator(population=2048, window=2 * 2048)
    everything = NoiseScaleEstimator(population=2048)
    for est in (windowed, everything):
        before.feed(est, 256, 4, 20, seed=1)
        after.feed(est, 256, 4, 2, seed=2)
    reading = windowed.estimate()
    assert reading.low <= after.b_simple <= reading.high and reading.measurements == 16
    assert everything.b_simple < 0.1 * after.b_simple


def test_measurement_batch_is_uniform_distinct_and_reproducible() -> None:
    first = measurement_batch(100, 30, seed=7, step=3)
    assert torch.equal(first, measurement_batch(100, 30, seed=7, step=3))
    assert len(set(first.tolist())) == 30 and 0 <= int(first.min()) and int(first.max()) < 100
    assert not torch.equal(first, measurement_batch(100, 30, seed=7, step=4))
    assert not torch.equal(first, measurement_batch(100, 30, seed=8, step=3))
    counts = torch.bincount(torch.cat([measurement_batch(10, 5, 0, s) for s in range(2000)]), minlength=10)
    assert int(counts.min()) > 900 and int(counts.max()) < 1100  # each index ~1000 times of 10,000
    with pytest.raises(ValueError, match=r"size: must be an integer in \[1, n=10\]"):
        measurement_batch(10, 11, 0, 0)


@pytest.mark.slow
def test_b_simple_from_sampled_batches_matches_the_population(population: Population) -> None:
    """1200 steps at fixed w (8 micro-batches of 8, drawn with replacement): B_simple within 10%.

    Measured over 12 seeds: rms error 2.2%, worst 5.1% (B_simple, |G|² and tr(Σ) alike).
    """
    model = population.model()
    est = NoiseScaleEstimator()
    gen = torch.Generator().manual_seed(1)
    n = len(population.y)
    for _ in range(1200):
        idx = torch.randint(0, n, (64,), generator=gen)
        est.update(*grad_sq_norms_two_batch_sizes(model, half_mse, population.x[idx], population.y[idx], n_micro=8))
    reading = est.estimate()
    assert reading.b_simple == pytest.approx(population.b_simple, rel=0.10)
    assert reading.g_sq == pytest.approx(population.g_sq, rel=0.15)
    assert reading.trace_sigma == pytest.approx(population.trace_sigma, rel=0.10)
    assert reading.low <= population.b_simple <= reading.high


def test_b_simple_long_run_from_exact_per_example_gradients(population: Population) -> None:
    """20,000 steps from the closed-form per-example gradients (no autograd): within 5% (measured: 0.3-2%)."""
    rng = np.random.default_rng(3)
    per_example = population.per_example.numpy()
    b_small, n_micro, steps = 4, 8, 20_000
    idx = rng.integers(0, len(per_example), size=(steps, n_micro, b_small))
    micro = per_example[idx].mean(axis=2)  # (steps, n_micro, d)
    g_small_sq = (micro**2).sum(-1).mean(-1)
    g_big_sq = (micro.mean(1) ** 2).sum(-1)
    est = NoiseScaleEstimator()
    for small, big in zip(g_small_sq, g_big_sq, strict=True):
        est.update(float(small), float(big), b_small, b_small * n_micro)
    assert est.b_simple == pytest.approx(population.b_simple, rel=0.05)


def test_grad_sq_norms_match_a_manual_computation(population: Population) -> None:
    model = population.model()
    x, y = population.x[:50], population.y[:50]  # 50 = 4 * 12 + 2: the last 2 are left out
    g_small_sq, g_big_sq, b_small, b_big = grad_sq_norms_two_batch_sizes(model, half_mse, x, y, n_micro=4)
    assert (b_small, b_big) == (12, 48)
    per_example = population.per_example[:48]  # closed form: (x·w − y) x
    micro = per_example.reshape(4, 12, -1).mean(1)
    assert g_small_sq == pytest.approx(float((micro**2).sum(1).mean()), rel=1e-10)
    assert g_big_sq == pytest.approx(float((per_example.mean(0) ** 2).sum()), rel=1e-10)


def test_grad_sq_norms_leave_grad_and_buffers_alone() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    x, y = torch.randn(32, 4), torch.randint(0, 3, (32,))
    nn.functional.cross_entropy(model(x), y).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    buffers = [b.clone() for b in model.buffers()]
    g_small_sq, g_big_sq, _, _ = grad_sq_norms_two_batch_sizes(model, nn.functional.cross_entropy, x, y, n_micro=4)
    assert g_small_sq > g_big_sq > 0
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads, strict=True))
    assert all(torch.equal(b, s) for b, s in zip(model.buffers(), buffers, strict=True))


def test_grad_sq_norms_refuse_bad_input() -> None:
    model = nn.Linear(2, 1)
    x, y = torch.randn(8, 2), torch.randn(8, 1)
    with pytest.raises(ValueError, match="n_micro: must be an integer >= 2"):
        grad_sq_norms_two_batch_sizes(model, nn.functional.mse_loss, x, y, n_micro=1)
    with pytest.raises(ValueError, match="need at least 16 examples"):
        grad_sq_norms_two_batch_sizes(model, nn.functional.mse_loss, x, y, n_micro=16)
    with pytest.raises(ValueError, match="same number of examples"):
        grad_sq_norms_two_batch_sizes(model, nn.functional.mse_loss, x, y[:4], n_micro=2)
