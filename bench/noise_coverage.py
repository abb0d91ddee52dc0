"""Coverage of the gradient-noise-scale interval under the training loop's own defaults, against the exact value.

    python -m bench.noise_coverage [--seeds 400] [--batch-size 128] [--every 1]

The digits MLP of ``trainers.classifier`` (hidden 128, depth 2, SGD momentum 0.9,
lr 0.2, batch 128, seed 0) is trained 10 epochs by the real loop; then, at those
parameters, every per-example gradient of the 1,438 training examples gives the
exact ``tr(Σ)/|G|²``. The estimator is fed one epoch's window exactly as
``trainers/loop.py`` feeds it (:func:`feed_like_the_loop`: the loop's estimator,
``measurement_batch(N, len(batch), seed, step)`` at each measured step, the
short last batch too, ``noise_scale_micro`` micro-batches), once per seed.
Printed: coverage of the interval (an open one covers when its lower end is
below the truth), how often it is open and above range, and the median reading
over the exact value (above-range readings counted as infinite).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from trainers.api import RecordingReporter
from trainers.classifier import make_lr_schedule, make_optimizer, parse_params
from trainers.data import load_dataset
from trainers.loop import LoopSettings, _noise_estimator, make_rngs, train
from trainers.models import build_model
from trainers.noise_scale import NoiseScale, NoiseScaleEstimator, measurement_batch

__all__ = ["Exact", "exact", "feed_like_the_loop", "trained_digits_mlp", "per_example_gradients", "coverage"]


@dataclasses.dataclass(frozen=True)
class Exact:
    """``tr(Σ)``, ``|G|²`` and their ratio over the whole population of per-example gradients."""

    trace_sigma: float
    g_sq: float

    @property
    def b_simple(self) -> float:
        return self.trace_sigma / self.g_sq


def exact(per_example: np.ndarray) -> Exact:
    """The population values: ``G`` the mean gradient, ``Σ`` the covariance divided by N."""
    mean = per_example.mean(axis=0)
    return Exact(float(((per_example - mean) ** 2).sum(axis=1).mean()), float(mean @ mean))


def loop_steps(n: int, batch_size: int, every: int, first_step: int) -> Iterator[tuple[int, int, int]]:
    """``(step, batch, examples seen)`` of the steps the loop measures in one epoch (as ``_measure_noise``)."""
    micro = LoopSettings(epochs=1, batch_size=batch_size).noise_scale_micro
    for k, start in enumerate(range(0, n, batch_size)):
        step, batch = first_step + k, min(batch_size, n - start)
        if step % every == 0 and batch >= 2 * micro:
            yield step, batch, start


def feed_like_the_loop(
    per_example: np.ndarray, batch_size: int, seed: int, every: int = 1, epochs: int = 1
) -> NoiseScaleEstimator:
    """The loop's estimator after ``epochs`` epochs of measurements from these per-example gradients.

    Each measured step draws ``measurement_batch(N, batch, seed, step)``, cuts it
    into the loop's ``noise_scale_micro`` consecutive micro-batches (a remainder
    left out, as :func:`~trainers.noise_scale.grad_sq_norms_two_batch_sizes` does)
    and feeds ``(|G_small|², |G_big|²)`` at the examples seen so far.
    """
    n = len(per_example)
    settings = LoopSettings(epochs=epochs, batch_size=batch_size)
    estimator, n_micro = _noise_estimator(settings, n), settings.noise_scale_micro
    steps_per_epoch = math.ceil(n / batch_size)
    for epoch in range(epochs):
        for step, batch, start in loop_steps(n, batch_size, every, epoch * steps_per_epoch):
            idx = measurement_batch(n, batch, seed, step).numpy()
            b_small = batch // n_micro
            micro = per_example[idx[: n_micro * b_small]].reshape(n_micro, b_small, -1).mean(axis=1)
            g_small_sq = float((micro**2).sum(axis=1).mean())
            big = micro.mean(axis=0)
            estimator.update(g_small_sq, float(big @ big), b_small, n_micro * b_small, at=epoch * n + start)
    return estimator


def trained_digits_mlp(
    epochs: int = 10, batch_size: int = 128, lr: float = 0.2, seed: int = 0
) -> tuple[nn.Module, object]:
    """The classifier's default MLP on the digits after ``epochs`` epochs of the real loop; (model, data)."""
    params = parse_params({"lr": lr, "batch_size": batch_size})
    data = load_dataset("digits")
    init, rngs = make_rngs(seed, torch.device("cpu"))
    model = build_model(dataclasses.asdict(params), data.input_shape, data.n_classes, init)
    optimizer = make_optimizer(params, model)
    schedule = make_lr_schedule(params, math.ceil(len(data.y_train) / batch_size), epochs)
    train(
        model, optimizer, schedule, data, LoopSettings(epochs=epochs, batch_size=batch_size), rngs, RecordingReporter()
    )
    return model, data


def per_example_gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """``(N, n_params)`` float64: the gradient of each example's cross-entropy (train mode, as measured)."""
    model.train()
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        out = torch.func.functional_call(model, p, (xi[None],))
        return F.cross_entropy(out, yi[None])

    grads = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))(params, x, y)
    return torch.cat([g.reshape(len(x), -1) for g in grads.values()], dim=1).double().numpy()


def coverage(per_example: np.ndarray, batch_size: int, seeds: range, every: int = 1) -> dict[str, float]:
    """Coverage, open and above-range fractions and the median reading / exact over ``seeds``."""
    truth = exact(per_example).b_simple
    readings: list[NoiseScale] = [feed_like_the_loop(per_example, batch_size, s, every).estimate() for s in seeds]
    covered = [r.low <= truth <= r.high for r in readings]
    return {
        "truth": truth,
        "coverage": float(np.mean(covered)),
        "missed_low": float(np.mean([r.high < truth for r in readings])),  # the interval lies below the truth
        "open": float(np.mean([math.isinf(r.high) for r in readings])),
        "above_range": float(np.mean([r.above_range for r in readings])),
        "above_range_wrong": float(np.mean([r.above_range and truth < r.limit for r in readings])),
        "median_ratio": float(np.median([r.b_simple / truth for r in readings])),
        "measurements": float(np.mean([r.measurements for r in readings])),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=128, help="the trained model's and the measurement's")
    parser.add_argument("--every", type=int, default=1, help="noise_scale_every")
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model, data = trained_digits_mlp(args.epochs, args.batch_size)
    per_example = per_example_gradients(model, data.x_train, data.y_train)
    top = np.sort(((per_example - per_example.mean(0)) ** 2).sum(1))[::-1]
    share = top[: max(1, len(top) // 100)].sum() / top.sum()
    result = coverage(per_example, args.batch_size, range(args.seeds), args.every)
    print(
        f"digits MLP after {args.epochs} epochs at B={args.batch_size}: N={len(per_example)}, "
        f"top 1% of examples carry {share:.0%} of tr(Σ)"
    )
    print(" ".join(f"{k}={v:.4g}" for k, v in result.items()))


if __name__ == "__main__":
    main()
