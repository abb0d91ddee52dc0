"""The built-in classifier's hyperparameters: :class:`ClassifierParams`, parsed and checked without torch
(``hypersweep check`` reads them; :mod:`trainers.classifier` re-exports them, :mod:`trainers.classifier_train`
trains with them)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from trainers.api import TrialConfig

__all__ = ["ClassifierParams", "ACCEPTED_PARAMS", "OPTIMIZERS", "PIECEWISE", "parse_params", "check_data_parallel"]

OPTIMIZERS = ("sgd", "adam", "adamw")
PIECEWISE = "piecewise"  # a recorded schedule: lr_points instead of a family


@dataclasses.dataclass(frozen=True)
class ClassifierParams:
    """The classifier's hyperparameters; only ``lr`` is required."""

    lr: float
    model: str = "mlp"
    batch_size: int = 32
    optimizer: str = "sgd"
    momentum: float = 0.9  # sgd only
    weight_decay: float = 0.0
    schedule: str = "constant"  # a spaces.schedules family
    warmup: float = 0.0  # fraction of the total optimizer steps
    hidden: int = 128  # mlp
    depth: int = 2  # mlp: number of hidden layers
    channels: int = 16  # cnn: channels of the first conv layer
    dropout: float = 0.0
    lr_scaling: str = "none"  # spaces.batch.LRScaling rule
    base_batch_size: int = 32  # the batch size at which lr was tuned
    arch: str = ""  # an architecture genome's canonical string; replaces ``model`` when set
    lr_points: tuple = ()  # schedule = "piecewise": ((step, lr), ...), e.g. a PBT member's recorded schedule

    def __post_init__(self) -> None:
        from trainers.models import MODELS  # with torch: params are parsed where a trial runs

        _check_choice("model", self.model, MODELS)
        _check_choice("optimizer", self.optimizer, OPTIMIZERS)
        if (self.schedule == PIECEWISE) != bool(self.lr_points):
            raise ValueError(f"params.lr_points: give them with schedule = {PIECEWISE!r}, and only then")
        _check_range("lr", self.lr, 0.0, math.inf)
        _check_range("momentum", self.momentum, 0.0, 1.0, high_open=True)
        _check_range("weight_decay", self.weight_decay, 0.0, math.inf)
        _check_range("warmup", self.warmup, 0.0, 1.0, high_open=True)
        _check_range("dropout", self.dropout, 0.0, 1.0, high_open=True)
        for name in ("batch_size", "hidden", "channels", "base_batch_size"):
            _check_range(name, getattr(self, name), 1, math.inf)
        _check_range("depth", self.depth, 0, math.inf)
        if self.arch:
            try:
                from spaces.architecture import genome_from_string

                genome_from_string(self.arch)
            except ValueError as exc:
                raise ValueError(f"params.arch={self.arch!r}: not a valid genome ({exc})") from None


ACCEPTED_PARAMS: frozenset[str] = frozenset(f.name for f in dataclasses.fields(ClassifierParams))
_FIELD_KINDS: dict[str, str] = {f.name: str(f.type) for f in dataclasses.fields(ClassifierParams)}


def _check_choice(name: str, value: object, options: tuple[str, ...]) -> None:
    if value not in options:
        raise ValueError(f"params.{name}={value!r}: must be one of {list(options)}")


def _check_range(name: str, value: float, low: float, high: float, high_open: bool = False) -> None:
    if not (low <= value <= high) or (high_open and value == high):
        bracket = ")" if high_open or high == math.inf else "]"
        raise ValueError(f"params.{name}={value!r}: must be in [{low}, {high}{bracket}")


def _coerce(name: str, value: Any) -> Any:
    """Ints may stand for floats; integral floats (32.0) for ints; bools for neither."""
    kind = _FIELD_KINDS[name]
    if kind == "tuple":
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"params.{name}={value!r}: must be a list of [step, lr] pairs")
        return tuple(tuple(point) if isinstance(point, (list, tuple)) else point for point in value)
    if kind == "str":
        if not isinstance(value, str):
            raise ValueError(f"params.{name}={value!r}: must be a string")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"params.{name}={value!r}: must be a number")
    if not math.isfinite(value):
        raise ValueError(f"params.{name}={value!r}: must be finite")
    if kind == "int":
        if value != int(value):
            raise ValueError(f"params.{name}={value!r}: must be an integer")
        return int(value)
    return float(value)


def parse_params(params: Mapping[str, Any]) -> ClassifierParams:
    """Validate and type the trial's params; unknown or missing names raise ValueError."""
    unknown = sorted(set(params) - ACCEPTED_PARAMS)
    if unknown:
        raise ValueError(f"unknown params {unknown}; the classifier accepts {sorted(ACCEPTED_PARAMS)}")
    if "lr" not in params:
        raise ValueError(f"params.lr is required; the classifier accepts {sorted(ACCEPTED_PARAMS)}")
    return ClassifierParams(**{name: _coerce(name, value) for name, value in params.items()})


def check_data_parallel(p: ClassifierParams, config: TrialConfig) -> None:
    """Raise ValueError unless the global batch splits evenly over the ``data_parallel`` replicas."""
    k = config.data_parallel
    if p.batch_size % k:
        raise ValueError(
            f"params.batch_size={p.batch_size} with data_parallel={k}: the global batch is split evenly "
            f"over the replicas, so batch_size must be a multiple of data_parallel "
            f"(e.g. {max(k, p.batch_size // k * k)} or {(p.batch_size // k + 1) * k})"
        )
