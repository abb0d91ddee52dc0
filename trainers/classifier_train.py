"""The built-in classifier's training: data, model, optimizer and LR schedule from ``config.seed``, then
:func:`trainers.loop.train`.

:func:`trainers.classifier.fit` (the trainer a spec names) imports this module when a trial runs; checking a
spec against the trainer reads :mod:`trainers.classifier` alone, which does not import torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from spaces.architecture import genome_from_string
from spaces.batch import LRScaling
from spaces.schedules import Piecewise, make_schedule
from trainers.api import Reporter, TrialConfig
from trainers.classifier_params import PIECEWISE, ClassifierParams, check_data_parallel, parse_params
from trainers.data import load_dataset
from trainers.ddp import launch
from trainers.ddp_rank import current_rank, process_group, rank_device
from trainers.genome_models import build_genome_model, count_params_and_macs
from trainers.loop import CHECKPOINT_NAME, LoopSettings, Replica, Schedule, make_rngs, train
from trainers.models import build_model, set_dropout_generator
from trainers.oom import run_with_oom_retry

__all__ = ["run", "resolve_device", "torch_settings", "make_optimizer", "make_lr_schedule"]

ENTRY = "trainers.classifier:fit"  # what each data-parallel rank runs: the trainer the spec names


def resolve_device(config: TrialConfig) -> torch.device:
    """``cpu``; ``cuda:{devices[0]}`` for leased devices; "auto" picks CUDA when there is one."""
    if config.device == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        if config.device == "cuda" or config.devices:
            raise RuntimeError(
                f"device={config.device!r}, devices={list(config.devices)}: CUDA is not available in this process"
            )
        return torch.device("cpu")
    return torch.device(f"cuda:{config.devices[0]}" if config.devices else "cuda")


@contextlib.contextmanager
def torch_settings(threads: int, deterministic: bool, device: torch.device) -> Iterator[None]:
    """Set torch's (process-wide) thread count and determinism for one trial, then restore them."""
    old_threads, old_deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    if deterministic and device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic or old_deterministic)
    try:
        yield
    finally:
        torch.set_num_threads(old_threads)
        torch.use_deterministic_algorithms(old_deterministic)


def make_optimizer(p: ClassifierParams, model: nn.Module) -> torch.optim.Optimizer:
    """SGD (with momentum), Adam or AdamW; the lr is set by the loop at every step."""
    if p.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=p.lr, momentum=p.momentum, weight_decay=p.weight_decay)
    if p.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=p.lr, weight_decay=p.weight_decay)
    return torch.optim.AdamW(model.parameters(), lr=p.lr, weight_decay=p.weight_decay)


@dataclasses.dataclass(frozen=True)
class _Zero:
    """lr = 0 at every step (the spaces schedules require a positive base lr)."""

    def __call__(self, step: int) -> float:
        return 0.0


def make_lr_schedule(p: ClassifierParams, steps_per_epoch: int, epochs: int) -> Schedule:
    """The ``p.schedule`` family at ``p.lr`` scaled to ``p.batch_size``, with ``p.warmup`` of the steps."""
    if p.schedule == PIECEWISE:
        return Piecewise.from_list([list(point) for point in p.lr_points])
    if p.lr == 0.0:
        return _Zero()
    total_steps = steps_per_epoch * epochs
    base_lr = LRScaling(p.lr_scaling, p.base_batch_size)(p.lr, p.batch_size)
    return make_schedule(p.schedule, base_lr, total_steps, warmup_steps=int(p.warmup * total_steps))


def _identity(config: TrialConfig) -> dict[str, Any]:
    """What a checkpoint must match to be resumed by this trial (its own params: a segment's overrides, such as a
    resized trial's learning rate, do not make its checkpoint another trial's)."""
    return {
        "params": dict(config.own_params),
        "seed": config.seed,
        "dataset": config.dataset,
        "options": {k: v for k, v in config.options.items() if k != "max_micro_batch"},  # same math either way
    }


def _option_int(options: Mapping[str, Any], name: str, default: int, minimum: int) -> int:
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"options.{name}={value!r}: must be an int >= {minimum}")
    return value


def _noise_option(options: Mapping[str, Any], name: str, default: float, upper: float, rule: str) -> float:
    """A noise-scale option that is a number in ``(0, upper)``."""
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < upper:
        raise ValueError(f"options.{name}={value!r}: must be {rule} (default {default})")
    return float(value)


def _threads(options: Mapping[str, Any]) -> int:
    threads = options.get("torch_threads", 1)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"options.torch_threads={threads!r}: must be an int >= 1")
    return threads


def _max_micro_batch(options: Mapping[str, Any]) -> int | None:
    value = options.get("max_micro_batch")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"options.max_micro_batch={value!r}: must be an int >= 1 (examples per replica pass)")
    return value


def run(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    """Train a classifier as ``config`` says, reporting once per epoch; return the last metrics."""
    params = parse_params(config.params)
    check_data_parallel(params, config)
    max_micro_batch = _max_micro_batch(config.options)
    rank = current_rank()
    if rank is None:  # the launching process: an out-of-memory error may be retried ([trainer] oom_retry)
        return run_with_oom_retry(
            lambda micro: _fit_here(config, reporter, params, micro),
            max_micro_batch,
            params.batch_size,
            config.data_parallel,
            config.oom_retry,
        )
    return _fit_here(config, reporter, params, max_micro_batch)


def _fit_here(
    config: TrialConfig, reporter: Reporter, params: ClassifierParams, max_micro_batch: int | None
) -> dict[str, float]:
    """This process's part: all of a one-process trial, one rank, or (data-parallel) the launch of the ranks."""
    rank = current_rank()
    if rank is None and config.data_parallel > 1:
        make_lr_schedule(params, 1, config.schedule_epochs or config.epochs)  # fails here, not in k processes
        options = {**config.options, "max_micro_batch": max_micro_batch} if max_micro_batch else config.options
        metrics = launch(ENTRY, dataclasses.replace(config, options=options), reporter)
        if not isinstance(metrics, dict):  # pragma: no cover - the built-in trainer's rank 0 returns its metrics
            raise TypeError(f"the classifier's rank 0 returned {metrics!r}, not its metrics")
        return metrics
    if rank is not None and rank.world_size != config.data_parallel:
        raise ValueError(f"data_parallel={config.data_parallel} but this rank's WORLD_SIZE={rank.world_size}")
    replica = Replica(rank.rank, rank.world_size) if rank is not None else Replica()
    device = rank_device(config) if rank is not None else resolve_device(config)
    group = process_group(device) if rank is not None else contextlib.nullcontext()
    with torch_settings(_threads(config.options), config.deterministic, device), group:
        # The model (and its DDP reducer) is freed when _train returns, before the process group goes.
        return _train(config, reporter, params, max_micro_batch, replica, device)


def _train(
    config: TrialConfig,
    reporter: Reporter,
    params: ClassifierParams,
    max_micro_batch: int | None,
    replica: Replica,
    device: torch.device,
) -> dict[str, float]:
    data = load_dataset(config.dataset, config.options).to(device)
    init_generator, rngs = make_rngs(config.seed, device, replica.rank)
    model = _build(params, data.input_shape, data.n_classes, init_generator)
    size = _size_metrics(model, data.input_shape)
    model = model.to(device)
    set_dropout_generator(model, rngs.dropout)
    if replica.parallel:
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = make_optimizer(params, model)
    steps_per_epoch = math.ceil(len(data.y_train) / params.batch_size)
    schedule = make_lr_schedule(params, steps_per_epoch, config.schedule_epochs or config.epochs)
    settings = LoopSettings(
        epochs=config.epochs,
        batch_size=params.batch_size,
        checkpoint_path=Path(config.checkpoint_dir) / CHECKPOINT_NAME if config.checkpoint_dir else None,
        checkpoint_every=config.checkpoint_every,
        identity=_identity(config),
        max_micro_batch=max_micro_batch,
        inherit=config.inherit_checkpoint,
        noise_scale_every=_option_int(config.options, "noise_scale_every", 0, minimum=0),
        noise_scale_micro=_option_int(config.options, "noise_scale_micro", 4, minimum=2),
        noise_scale_window=_noise_option(config.options, "noise_scale_window", 1.0, math.inf, "epochs > 0"),
        noise_scale_confidence=_noise_option(config.options, "noise_scale_confidence", 0.9, 1.0, "in (0, 1)"),
    )
    final = train(model, optimizer, schedule, data, settings, rngs, _WithStatic(reporter, size), replica)
    return {**final, **size}


def _build(p: ClassifierParams, input_shape: tuple[int, ...], n_classes: int, g: torch.Generator) -> nn.Module:
    if p.arch:
        return build_genome_model(genome_from_string(p.arch), input_shape, n_classes, g)
    return build_model(dataclasses.asdict(p), input_shape, n_classes, g)


def _size_metrics(model: nn.Module, input_shape: tuple[int, ...]) -> dict[str, float]:
    n_params, macs = count_params_and_macs(model, input_shape)
    return {"n_params": float(n_params), "macs": float(macs)}


class _WithStatic:
    """A reporter that adds fixed metrics (model size) to every report."""

    def __init__(self, inner: Reporter, static: Mapping[str, float]) -> None:
        self._inner, self._static = inner, dict(static)

    def report(self, step: int, metrics: Mapping[str, float]) -> None:
        self._inner.report(step, {**metrics, **self._static})

    def should_stop(self) -> bool:
        return self._inner.should_stop()
