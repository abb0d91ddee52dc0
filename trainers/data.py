"""Datasets as in-memory tensors with a fixed train/validation split.

The split depends only on ``data_seed`` (``options["data_seed"]``, default 0), never
on the trial seed, so every trial of a study trains and validates on the same rows.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainers.mnist1d import DEFAULT_SAMPLES, load_arrays

__all__ = ["Dataset", "DATASETS", "load_dataset", "shard", "micro_batches"]

DIGITS_PATH = Path(__file__).with_name("data") / "digits.csv.gz"
VALIDATION_FRACTION = 0.2


@dataclasses.dataclass(frozen=True)
class Dataset:
    """Train and validation tensors; ``x`` has shape ``(n, *input_shape)``, ``y`` is int64."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    input_shape: tuple[int, ...]
    n_classes: int

    def to(self, device: torch.device | str) -> Dataset:
        """The same dataset with every tensor on ``device``."""
        return dataclasses.replace(
            self,
            x_train=self.x_train.to(device),
            y_train=self.y_train.to(device),
            x_val=self.x_val.to(device),
            y_val=self.y_val.to(device),
        )


@functools.lru_cache(maxsize=1)
def _digits_array() -> np.ndarray:
    """The raw digits table (1797 x 65, pixels 0..16 then the label), read once per process."""
    with gzip.open(DIGITS_PATH, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.int64)
    table.setflags(write=False)
    return table


def _split(x: np.ndarray, y: np.ndarray, data_seed: int) -> tuple[np.ndarray, ...]:
    """80/20 train/validation split by a permutation drawn from ``data_seed``."""
    order = np.random.default_rng(data_seed).permutation(len(x))
    n_val = int(round(VALIDATION_FRACTION * len(x)))
    val, train = order[:n_val], order[n_val:]
    return x[train], y[train], x[val], y[val]


def _as_dataset(x: np.ndarray, y: np.ndarray, data_seed: int, n_classes: int) -> Dataset:
    x_train, y_train, x_val, y_val = _split(x, y, data_seed)
    return Dataset(
        x_train=torch.tensor(x_train, dtype=torch.float32),
        y_train=torch.tensor(y_train, dtype=torch.int64),
        x_val=torch.tensor(x_val, dtype=torch.float32),
        y_val=torch.tensor(y_val, dtype=torch.int64),
        input_shape=tuple(x.shape[1:]),
        n_classes=n_classes,
    )


def _int_option(options: Mapping[str, Any], key: str, default: int, minimum: int) -> int:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"options.{key}={value!r}: must be an int >= {minimum}")
    return value


def load_digits(options: Mapping[str, Any]) -> Dataset:
    """The 8x8 handwritten digits, pixels scaled to [0, 1], shaped ``(n, 1, 8, 8)``."""
    table = _digits_array()
    x = (table[:, :64].astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = table[:, 64]
    return _as_dataset(x, y, _int_option(options, "data_seed", 0, 0), n_classes=10)


def load_synthetic(options: Mapping[str, Any]) -> Dataset:
    """A seeded Gaussian mixture: each class is two unit-variance clusters in ``n_features`` dims.

    Cluster centres are drawn with standard deviation 0.5, so the classes overlap (an MLP
    reaches about 70-75% validation accuracy with the defaults).
    """
    n_samples = _int_option(options, "n_samples", 2000, 10)
    n_features = _int_option(options, "n_features", 20, 1)
    n_classes = _int_option(options, "n_classes", 4, 2)
    data_seed = _int_option(options, "data_seed", 0, 0)
    rng = np.random.default_rng([data_seed, 1])  # a stream apart from the split's
    centers = rng.normal(scale=0.5, size=(n_classes, 2, n_features))
    y = rng.integers(n_classes, size=n_samples)
    cluster = rng.integers(2, size=n_samples)
    x = centers[y, cluster] + rng.normal(scale=1.0, size=(n_samples, n_features))
    return _as_dataset(x.astype(np.float32), y, data_seed, n_classes)


def load_mnist1d(options: Mapping[str, Any]) -> Dataset:
    """MNIST-1D (:mod:`trainers.mnist1d`): ``n_samples`` sequences of 40 values (default 62,500: 50,000 to train).

    Generated from ``data_seed``, which also draws the 80/20 split; ``data_cache``
    names the folder of the generated arrays' cache.
    """
    n_samples = _int_option(options, "n_samples", DEFAULT_SAMPLES, 10)
    if n_samples % 10:
        raise ValueError(f"options.n_samples={n_samples}: must be a multiple of 10 for mnist1d (as many per class)")
    data_seed = _int_option(options, "data_seed", 0, 0)
    cache = options.get("data_cache")
    if cache is not None and not isinstance(cache, str):
        raise ValueError(f"options.data_cache={cache!r}: must be a folder path (a string)")
    x, y = load_arrays(n_samples, data_seed, cache)
    return _as_dataset(x, y, data_seed, n_classes=10)


DATASETS = {"digits": load_digits, "synthetic": load_synthetic, "mnist1d": load_mnist1d}


def load_dataset(name: str, options: Mapping[str, Any] | None = None) -> Dataset:
    """Load dataset ``name`` (one of :data:`DATASETS`) with the trainer's ``options``."""
    if name not in DATASETS:
        raise ValueError(f"dataset={name!r}: unknown; valid datasets: {sorted(DATASETS)}")
    return DATASETS[name](options or {})


def shard(indices: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Replica ``rank``'s part of one global batch: every ``world_size``-th index from ``rank`` on.

    Every replica holds the same global batch (drawn from the same shuffle
    generator), so the shards of one step are disjoint and together are exactly
    the batch a single process would train on. A short last batch gives shards
    that differ by at most one example (some may be empty); nothing is padded
    or dropped, unlike ``torch.utils.data.DistributedSampler``.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank={rank!r}: must be in [0, world_size={world_size})")
    return indices[rank::world_size]


def micro_batches(indices: torch.Tensor, max_size: int | None) -> list[torch.Tensor]:
    """``indices`` cut into consecutive chunks of at most ``max_size`` (``None``: one chunk).

    Always at least one chunk, possibly empty, so that every replica takes part
    in the step's gradient all-reduce.
    """
    if max_size is None or len(indices) <= max_size:
        return [indices]
    if max_size < 1:
        raise ValueError(f"max_size={max_size!r}: must be >= 1")
    return list(torch.split(indices, max_size))
