"""The simulator's trials: what each one does, as a :class:`TrialPlan` a :class:`TrialModel` draws.

Two models: :class:`TableModel` (the NAS-Bench-201 12-epoch accuracy table) and :class:`CurveModel` (synthetic
learning curves, their time per example following a :class:`~cluster.trial_cost.LogLinearLaw` in the parameters
and the width where one is given: the form the trial model fits). Every draw comes from the generator the
simulator passes (seeded by the trial's number and attempt).

Pure Python and numpy: nothing here talks to Dask.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .trial_cost import LogLinearLaw, Resources

__all__ = ["TrialPlan", "TrialModel", "TableModel", "CurveModel", "NB201_OPS", "nb201_cell", "check_positive"]


# --- trial models ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TrialPlan:
    """What one trial will do: per-epoch durations (virtual s) and per-epoch metrics."""

    epoch_seconds: tuple[float, ...]
    metrics: tuple[Mapping[str, float], ...]

    def __post_init__(self) -> None:
        if not self.epoch_seconds:
            raise ValueError("a trial plan needs at least one epoch")
        if len(self.epoch_seconds) != len(self.metrics):
            raise ValueError(f"epoch_seconds has {len(self.epoch_seconds)} entries but metrics has {len(self.metrics)}")
        for i, seconds in enumerate(self.epoch_seconds):
            if not (math.isfinite(seconds) and seconds >= 0):
                raise ValueError(f"epoch_seconds[{i}]={seconds!r}: must be a finite number >= 0")

    @property
    def duration(self) -> float:
        return float(sum(self.epoch_seconds))


class TrialModel(Protocol):
    """Turns a trial config (the dict the controller submits) into a plan."""

    def plan(self, config: Mapping[str, Any], rng: np.random.Generator) -> TrialPlan: ...


def _epoch_seconds(trial_seconds: float, epochs: int, jitter: float, rng: np.random.Generator) -> tuple[float, ...]:
    """``trial_seconds`` split over ``epochs``, each epoch scaled by a lognormal(0, jitter) draw."""
    base = trial_seconds / epochs
    if jitter <= 0:
        return tuple(base for _ in range(epochs))
    factors = rng.lognormal(mean=-0.5 * jitter**2, sigma=jitter, size=epochs)  # mean 1
    return tuple(float(base * f) for f in factors)


def check_positive(name: str, value: float, allow_zero: bool = False) -> float:
    value = float(value)
    ok = value >= 0 if allow_zero else value > 0
    if not (math.isfinite(value) and ok):
        raise ValueError(f"{name}={value!r}: must be a finite number {'>= 0' if allow_zero else '> 0'}")
    return value


# NAS-Bench-201 ---------------------------------------------------------------------------------

NB201_OPS = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
NB201_DATASETS = {"cifar10": "cifar10", "cifar100": "cifar100", "imagenet": "imagenet", "imagenet16-120": "imagenet"}
_NB201_CHANCE = {"cifar10": 10.0, "cifar100": 1.0, "imagenet": 1.0 / 1.2}


def nb201_cell(ops: Sequence[str]) -> str:
    """The NAS-Bench-201 cell string for six edge ops, edges in the benchmark's order.

    Edges: node1<-0, node2<-0, node2<-1, node3<-0, node3<-1, node3<-2.
    """
    if len(ops) != 6:
        raise ValueError(f"a NAS-Bench-201 cell has 6 edges, got {len(ops)} ops: {list(ops)}")
    for op in ops:
        if op not in NB201_OPS:
            raise ValueError(f"op {op!r} is not a NAS-Bench-201 op (valid: {', '.join(NB201_OPS)})")
    o = list(ops)
    return f"|{o[0]}~0|+|{o[1]}~0|{o[2]}~1|+|{o[3]}~0|{o[4]}~1|{o[5]}~2|"


class TableModel:
    """Trials looked up in the NAS-Bench-201 12-epoch table.

    A trial's cell comes from its params: a ``cell`` string param, or six op
    params ``{edge_prefix}0 .. {edge_prefix}5`` with NAS-Bench-201 op names.
    The dataset comes from the trial config's ``dataset`` (cifar10, cifar100,
    imagenet). The table holds only the 12-epoch accuracy, so the per-epoch
    curve is synthetic: it rises from chance and ends exactly at the table's
    ``{dataset}-val`` value at the last epoch (``accuracy``, in %); the last
    report also carries ``test_accuracy``. The table has no training times:
    every trial takes ``trial_seconds`` of virtual time, jittered per epoch.
    """

    def __init__(
        self,
        path: str | Path,
        trial_seconds: float = 60.0,
        jitter: float = 0.1,
        edge_prefix: str = "e",
        metric: str = "accuracy",
    ) -> None:
        self.trial_seconds = check_positive("trial_seconds", trial_seconds)
        self.jitter = check_positive("jitter", jitter, allow_zero=True)
        self.edge_prefix = edge_prefix
        self.metric = metric
        self._rows = self._load(Path(path))

    @staticmethod
    def _load(path: Path) -> dict[str, dict[str, float]]:
        if not path.exists():
            raise FileNotFoundError(f"{path}: NAS-Bench-201 table not found")
        rows: dict[str, dict[str, float]] = {}
        with open(path, newline="") as fh:
            for row in csv.DictReader(fh):
                cell = row.pop("cellstr")
                row.pop("index", None)
                rows[cell] = {key: float(value) for key, value in row.items()}
        return rows

    def __len__(self) -> int:
        return len(self._rows)

    def best(self, dataset: str = "cifar10", split: str = "val") -> float:
        """The table's best accuracy for ``dataset``/``split`` (the optimum a search can reach)."""
        column = f"{self._dataset(dataset)}-{split}"
        return max(row[column] for row in self._rows.values())

    def lookup(self, params: Mapping[str, Any]) -> dict[str, float]:
        """The table row for a trial's params."""
        cell = self.cell_of(params)
        try:
            return self._rows[cell]
        except KeyError:
            raise KeyError(f"cell {cell!r} is not in the NAS-Bench-201 table") from None

    def cell_of(self, params: Mapping[str, Any]) -> str:
        if "cell" in params:
            return str(params["cell"])
        names = [f"{self.edge_prefix}{i}" for i in range(6)]
        missing = [n for n in names if n not in params]
        if missing:
            raise KeyError(f"params need a 'cell' string or the six edge ops {names}; missing {missing}")
        return nb201_cell([str(params[n]) for n in names])

    @staticmethod
    def _dataset(name: str) -> str:
        try:
            return NB201_DATASETS[str(name).lower()]
        except KeyError:
            raise ValueError(
                f"dataset {name!r} is not in the NAS-Bench-201 table (valid: cifar10, cifar100, imagenet)"
            ) from None

    def plan(self, config: Mapping[str, Any], rng: np.random.Generator) -> TrialPlan:
        dataset = self._dataset(config.get("dataset", "cifar10"))
        row = self.lookup(config["params"])
        epochs = int(config.get("epochs", 12))
        final, test = row[f"{dataset}-val"], row[f"{dataset}-test"]
        chance = _NB201_CHANCE[dataset]
        tau = epochs / 3.0
        norm = 1.0 - math.exp(-epochs / tau)
        metrics: list[dict[str, float]] = []
        for epoch in range(1, epochs + 1):
            frac = (1.0 - math.exp(-epoch / tau)) / norm
            value = chance + (final - chance) * frac
            metrics.append({self.metric: value, "epoch": float(epoch), "steps": float(epoch)})
        metrics[-1]["test_accuracy"] = test
        return TrialPlan(_epoch_seconds(self.trial_seconds, epochs, self.jitter, rng), tuple(metrics))


# Synthetic learning curves ---------------------------------------------------------------------


def _stable_unit(*parts: object) -> float:
    """A number in [0, 1) that depends only on ``parts`` (not on PYTHONHASHSEED)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64


class CurveModel:
    """Synthetic learning curves: ``acc(epoch) = a - b * exp(-epoch / c)`` plus noise.

    ``a`` (the asymptote) is a smooth, seeded function of the params, so a
    search has something to find: numeric params score by their distance to a
    hidden optimum (in log10 for positive values, as learning rates are
    searched), categorical ones by a seeded offset per choice. ``b`` and ``c``
    (how far below and how slowly) come from the trial's generator. Each
    epoch's duration is lognormal around ``epoch_seconds``; with a ``per_example`` law, around
    ``per_example(params, width) * examples_per_epoch`` instead, and each report carries ``examples`` seen.
    """

    def __init__(
        self,
        seed: int = 0,
        optimum: Mapping[str, float] | None = None,
        epoch_seconds: float = 5.0,
        jitter: float = 0.3,
        noise: float = 0.005,
        metric: str = "accuracy",
        per_example: LogLinearLaw | None = None,
        examples_per_epoch: int = 1000,
    ) -> None:
        if not isinstance(examples_per_epoch, int) or examples_per_epoch < 1:
            raise ValueError(f"examples_per_epoch={examples_per_epoch!r}: must be an int >= 1")
        self.per_example = per_example
        self.examples_per_epoch = examples_per_epoch
        self.seed = int(seed)
        self.optimum = dict(optimum or {})
        self.epoch_seconds = check_positive("epoch_seconds", epoch_seconds)
        self.jitter = check_positive("jitter", jitter, allow_zero=True)
        self.noise = check_positive("noise", noise, allow_zero=True)
        self.metric = metric

    def asymptote(self, params: Mapping[str, Any]) -> float:
        """The curve's ceiling for these params, in (0.1, 0.95]."""
        penalty = 0.0
        for name, value in sorted(params.items()):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                penalty += 0.1 * _stable_unit(self.seed, name, value)
                continue
            x = float(value)
            target = self.optimum.get(name)
            if target is None:
                target = 10 ** (-4 + 4 * _stable_unit(self.seed, name)) if x > 0 else 0.0
            if x > 0 and target > 0:
                distance = math.log10(x / target)
            else:
                distance = (x - target) / (abs(target) + 1.0)
            penalty += 0.15 * distance**2
        return 0.1 + 0.85 * math.exp(-penalty)

    def plan(self, config: Mapping[str, Any], rng: np.random.Generator) -> TrialPlan:
        epochs = int(config.get("epochs", 10))
        a = self.asymptote(config["params"])
        b = (a - 0.1) * rng.uniform(0.6, 1.0)
        c = rng.uniform(0.1, 0.5) * epochs
        seconds = _epoch_seconds(self.seconds_per_epoch(config) * epochs, epochs, self.jitter, rng)
        metrics = []
        for epoch in range(1, epochs + 1):
            value = a - b * math.exp(-epoch / c) + float(rng.normal(0.0, self.noise))
            metrics.append({self.metric: value, "epoch": float(epoch), "steps": float(epoch)})
            if self.per_example is not None:
                metrics[-1]["examples"] = float(epoch * self.examples_per_epoch)
        return TrialPlan(seconds, tuple(metrics))

    def seconds_per_epoch(self, config: Mapping[str, Any]) -> float:
        """An epoch's median seconds for a trial config (its ``params`` on ``data_parallel`` slots)."""
        if self.per_example is None:
            return self.epoch_seconds
        width = Resources(int(config.get("data_parallel", 1)))
        return self.per_example(config["params"], width) * self.examples_per_epoch
