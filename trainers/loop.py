"""The epoch loop: shuffle, minibatch steps with a per-step learning rate, evaluate, report, checkpoint.

Everything random comes from :class:`Rngs`, whose state is checkpointed with the
model and optimizer, so a run resumed from a checkpoint ends with bit-for-bit the
same metrics (on CPU) as one that was never interrupted.

The same loop runs in each replica of a data-parallel trial (:class:`Replica`,
the model wrapped in ``DistributedDataParallel``). Every replica draws the same
permutation from the shared shuffle generator, so all agree on each global
batch of ``batch_size`` examples; replica ``r`` trains on every ``k``-th example
of it from ``r`` on (:func:`trainers.data.shard`), in micro-batches of at most
``max_micro_batch`` (gradients accumulated under ``no_sync``, all-reduced once
per step). Each replica's loss is scaled so that the all-reduced gradient is the
gradient of the mean loss over the whole global batch, as in one process.
``steps`` and ``examples`` count optimizer steps and global examples, the same
whatever the width. Validation: each replica evaluates its shard of the
validation set and the sums (loss, correct) are all-reduced. Only rank 0 writes
checkpoints (with every replica's dropout generator state); every rank resumes
from the same file. The checkpoint carries the reports it covers, and a resumed run
sends them again first, so a report lost with a dying worker is delivered (the
controller keeps each once).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from trainers.api import Reporter
from trainers.checkpoint import load_checkpoint, save_checkpoint
from trainers.data import Dataset, micro_batches, shard
from trainers.noise_scale import NoiseScaleEstimator, grad_sq_norms_two_batch_sizes, measurement_batch

__all__ = [
    "LoopSettings",
    "Replica",
    "Rngs",
    "Progress",
    "Schedule",
    "make_rngs",
    "schedule_step",
    "train",
    "evaluate",
    "CHECKPOINT_NAME",
]

CHECKPOINT_NAME = "checkpoint.pt"
CHECKPOINT_FORMAT = 1


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """How long to train and where to checkpoint (``checkpoint_path=None``: never).

    ``identity`` is stored in each checkpoint; a checkpoint written under another
    identity (another trial's params or seed) is refused instead of resumed.
    """

    epochs: int
    batch_size: int
    checkpoint_path: Path | None = None
    checkpoint_every: int = 1
    eval_batch_size: int = 1024
    identity: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    inherit: bool = False  # PBT: resume another trial's checkpoint with this trial's hyperparameters
    max_micro_batch: int | None = None  # per replica; None: one forward/backward per step
    noise_scale_every: int = 0  # measure the gradient noise scale every k steps (0: never)
    noise_scale_micro: int = 4  # micro-batches per measurement (the small batch is B / this)
    noise_scale_window: float = 1.0  # average the measurements of the last this many epochs (of examples seen)
    noise_scale_confidence: float = 0.9  # level of the reported interval b_simple_lo..b_simple_hi

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "checkpoint_every", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r}: must be >= 1")
        if self.max_micro_batch is not None and self.max_micro_batch < 1:
            raise ValueError(f"max_micro_batch={self.max_micro_batch!r}: must be >= 1 (or None)")
        if not self.noise_scale_window > 0 or math.isinf(self.noise_scale_window):
            raise ValueError(f"noise_scale_window={self.noise_scale_window!r}: must be a finite number of epochs > 0")
        if not 0 < self.noise_scale_confidence < 1:
            raise ValueError(f"noise_scale_confidence={self.noise_scale_confidence!r}: must be in (0, 1), e.g. 0.9")


@dataclasses.dataclass(frozen=True)
class Replica:
    """This process's place in a data-parallel trial; ``Replica()`` is a single process.

    With ``world_size > 1`` the default process group must be initialised and the
    model wrapped in ``DistributedDataParallel``.
    """

    rank: int = 0
    world_size: int = 1

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank={self.rank!r}, world_size={self.world_size!r}: need 0 <= rank < world_size")

    @property
    def parallel(self) -> bool:
        return self.world_size > 1


@dataclasses.dataclass(frozen=True)
class Rngs:
    """The loop's random streams: ``shuffle`` (CPU), ``dropout`` (on the training device), ``numpy``."""

    shuffle: torch.Generator
    dropout: torch.Generator
    numpy: np.random.Generator

    def state(self) -> dict[str, Any]:
        return {
            "shuffle": self.shuffle.get_state(),
            "dropout": self.dropout.get_state(),
            "numpy": self.numpy.bit_generator.state,
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        self.shuffle.set_state(state["shuffle"])
        self.dropout.set_state(state["dropout"])
        self.numpy.bit_generator.state = state["numpy"]


def make_rngs(seed: int, device: torch.device, rank: int = 0) -> tuple[torch.Generator, Rngs]:
    """A CPU generator for weight init, and the loop's streams, all derived from ``seed``.

    Replica ``rank > 0`` of a data-parallel trial gets its own dropout stream (a child
    of rank 0's); init, shuffle and numpy streams are the same on every replica.
    """
    init, shuffle, dropout, numpy_seq = np.random.SeedSequence(seed).spawn(4)
    if rank > 0:
        dropout = dropout.spawn(rank)[rank - 1]

    def torch_generator(seq: np.random.SeedSequence, on: torch.device | str) -> torch.Generator:
        return torch.Generator(device=on).manual_seed(int(seq.generate_state(1, np.uint64)[0]))

    return torch_generator(init, "cpu"), Rngs(
        shuffle=torch_generator(shuffle, "cpu"),
        dropout=torch_generator(dropout, device),
        numpy=np.random.default_rng(numpy_seq),
    )


@dataclasses.dataclass
class Progress:
    """Counters carried across epochs (and checkpoints)."""

    epoch: int = 0  # epochs completed
    step: int = 0  # optimizer steps taken
    examples: int = 0  # training examples seen
    history: list[dict[str, float]] = dataclasses.field(default_factory=list)
    own_from: int = 1  # the first epoch of ``history`` this trial trained (PBT: later than 1 after an exploit)
    noise: NoiseScaleEstimator = dataclasses.field(default_factory=NoiseScaleEstimator)


Schedule = Callable[[int], float]


def train(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: Schedule,
    data: Dataset,
    settings: LoopSettings,
    rngs: Rngs,
    reporter: Reporter,
    replica: Replica = Replica(),
) -> dict[str, float]:
    """Train from the checkpoint if there is one, else from scratch; return the last metrics.

    In a data-parallel trial every replica calls this with the same arguments (but
    its own ``replica``), and ``reporter.should_stop()`` must give the same answer on
    every replica (the rank reporter of :mod:`trainers.ddp_rank` broadcasts rank 0's).
    """
    progress = _resume(settings, model, optimizer, rngs, replica, _noise_estimator(settings, len(data.y_train)))
    _report_again(progress.history, progress.own_from, reporter)
    for epoch in range(progress.epoch, settings.epochs):
        started = time.perf_counter()
        train_loss, lr = _train_epoch(model, optimizer, schedule, data, settings, rngs, progress, replica)
        val_loss, val_accuracy = _validate(model, data, settings.eval_batch_size, replica)
        metrics = {
            "epoch": float(epoch + 1),
            "train_loss": train_loss,
            "val_loss": val_loss,
            "val_accuracy": val_accuracy,
            "lr": lr,
            "steps": float(progress.step),
            "examples": float(progress.examples),
            "epoch_seconds": time.perf_counter() - started,
        }
        if settings.noise_scale_every:  # b_simple, _lo, _hi, _limit, _above_range (see NoiseScale.metrics)
            metrics.update(progress.noise.estimate().metrics())
        progress.epoch = epoch + 1
        progress.history.append(metrics)
        reporter.report(epoch + 1, metrics)
        if settings.checkpoint_path is not None and progress.epoch % settings.checkpoint_every == 0:
            _save(settings.checkpoint_path, settings.identity, model, optimizer, rngs, progress, replica)
        if reporter.should_stop():
            break
    return dict(progress.history[-1])


def _report_again(history: list[dict[str, float]], own_from: int, reporter: Reporter) -> None:
    """Send again the reports the checkpoint covers from epoch ``own_from`` on (epoch ``i + 1`` is ``history[i]``).

    A run that died after a report but before the controller received it would
    otherwise leave a gap: the re-run starts after that epoch. The controller keeps
    each (step, metrics) once, so the ones it already has are dropped there. The
    epochs before ``own_from`` came with an inherited checkpoint (PBT): they are
    another trial's reports, never this one's.
    """
    for epoch, metrics in enumerate(history, start=1):
        if epoch >= own_from:
            reporter.report(epoch, metrics)


def _train_epoch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: Schedule,
    data: Dataset,
    settings: LoopSettings,
    rngs: Rngs,
    progress: Progress,
    replica: Replica,
) -> tuple[float, float]:
    """One pass over the shuffled training set; returns (mean training loss over all replicas, last lr)."""
    model.train()
    n = len(data.y_train)
    order = torch.randperm(n, generator=rngs.shuffle).to(data.x_train.device)
    loss_sum, lr = 0.0, float("nan")
    for start in range(0, n, settings.batch_size):
        idx = order[start : start + settings.batch_size]
        lr = float(schedule(schedule_step(progress.epoch, start, n, settings.batch_size)))
        for group in optimizer.param_groups:
            group["lr"] = lr
        _measure_noise(model, data, len(idx), settings, rngs, progress, replica)
        optimizer.zero_grad(set_to_none=True)
        loss_sum += _accumulate_gradients(model, data, idx, settings.max_micro_batch, replica, progress, lr)
        optimizer.step()
        progress.step += 1
        progress.examples += len(idx)
    if replica.parallel:
        (loss_sum,) = _all_reduce_sum([loss_sum], data.x_train.device)
    return loss_sum / n, lr


def schedule_step(epoch: int, seen: int, n: int, batch_size: int) -> int:
    """Where the LR schedule is, counted in examples seen: ``epoch`` passes over ``n`` examples and ``seen`` of this
    one, in steps of this segment's ``batch_size`` (the schedule's unit). A trial whose global batch changed at a
    segment boundary (a resize) so goes on from the same point of its schedule; with one batch size throughout it
    is the optimizer step."""
    return epoch * math.ceil(n / batch_size) + seen // batch_size


def _measure_noise(
    model: nn.Module,
    data: Dataset,
    batch: int,
    settings: LoopSettings,
    rngs: Rngs,
    progress: Progress,
    replica: Replica,
) -> None:
    """Every ``noise_scale_every`` steps, feed |G|² at two batch sizes to the estimator.

    The norms come from ``batch`` examples drawn afresh from the whole training
    set (and their micro-batches), not from this step's batch: that one is drawn
    from the examples not yet seen this epoch, which the model fits worse than
    the rest, so its gradient is larger than |G| and B_simple comes out low
    (0.7x on digits at B=512). The draw depends only on the seed and the step,
    so the training itself and a resumed run are unchanged.

    One process only: under DDP the per-replica and all-reduced gradients would be
    the natural pair, which is not wired yet, so data-parallel trials skip it.
    """
    every = settings.noise_scale_every
    if not every or replica.parallel or progress.step % every or batch < 2 * settings.noise_scale_micro:
        return
    idx = measurement_batch(len(data.y_train), batch, rngs.shuffle.initial_seed(), progress.step)
    idx = idx.to(data.x_train.device)
    x, y = data.x_train[idx], data.y_train[idx]
    norms = grad_sq_norms_two_batch_sizes(model, F.cross_entropy, x, y, settings.noise_scale_micro)
    if not (math.isfinite(norms[0]) and math.isfinite(norms[1])):  # a diverged model: no gradient to measure
        return
    progress.noise.update(*norms, at=progress.examples)


def _noise_estimator(settings: LoopSettings, n_train: int) -> NoiseScaleEstimator:
    """The estimator for this run: batches are drawn without replacement from the ``n_train`` examples."""
    return NoiseScaleEstimator(
        population=n_train if n_train >= 2 else None,
        window=max(1, round(settings.noise_scale_window * n_train)),
        confidence=settings.noise_scale_confidence,
    )


def _accumulate_gradients(
    model: nn.Module,
    data: Dataset,
    idx: torch.Tensor,
    max_micro_batch: int | None,
    replica: Replica,
    progress: Progress,
    lr: float,
) -> float:
    """Backward passes over this replica's part of the global batch ``idx``; returns its summed loss.

    The gradients left in ``.grad`` (all-reduced and averaged by DDP over the
    replicas) are those of the mean loss over ``idx``.
    """
    local = shard(idx, replica.rank, replica.world_size)
    parts = micro_batches(local, max_micro_batch)
    loss_sum = 0.0
    for i, part in enumerate(parts):
        sync = i == len(parts) - 1
        with contextlib.nullcontext() if sync or not replica.parallel else model.no_sync():  # type: ignore[operator]
            logits = model(data.x_train[part])
            if len(parts) == 1 and not replica.parallel:
                loss = F.cross_entropy(logits, data.y_train[part])  # the single-process path, unchanged
                part_sum = loss.item() * len(part)
            else:  # sum / |global batch|, times k because DDP averages the replicas' gradients
                summed = F.cross_entropy(logits, data.y_train[part], reduction="sum")
                loss = summed * (replica.world_size / len(idx))
                part_sum = summed.item()
            if not math.isfinite(part_sum):
                raise FloatingPointError(
                    f"training loss is {part_sum} at epoch {progress.epoch + 1}, step {progress.step} (lr={lr:g})"
                )
            loss.backward()
        loss_sum += part_sum
    return loss_sum


def _all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    """Element-wise sums of ``values`` over all replicas (float64; on ``device`` for NCCL)."""
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return [float(v) for v in tensor.tolist()]


def _unwrap(model: nn.Module) -> nn.Module:
    """The module inside a ``DistributedDataParallel`` wrapper (or ``model`` itself)."""
    inner = getattr(model, "module", None)
    return inner if isinstance(inner, nn.Module) else model


@torch.no_grad()
def _validate(model: nn.Module, data: Dataset, batch_size: int, replica: Replica) -> tuple[float, float]:
    """(loss, accuracy) on the whole validation set; replicas evaluate shards and all-reduce the sums."""
    module = _unwrap(model)
    if not replica.parallel:
        return evaluate(module, data.x_val, data.y_val, batch_size)
    for buffer in module.buffers():  # batch-norm statistics as in rank 0's checkpoint
        dist.broadcast(buffer, src=0)
    part = shard(torch.arange(len(data.y_val), device=data.y_val.device), replica.rank, replica.world_size)
    loss_sum, correct = _evaluation_sums(module, data.x_val[part], data.y_val[part], batch_size)
    loss_sum, correct_sum = _all_reduce_sum([loss_sum, float(correct)], data.x_val.device)
    return loss_sum / len(data.y_val), correct_sum / len(data.y_val)


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1024) -> tuple[float, float]:
    """(mean cross-entropy, accuracy) of ``model`` on ``x, y``, in eval mode."""
    loss_sum, correct = _evaluation_sums(model, x, y, batch_size)
    return loss_sum / len(y), correct / len(y)


@torch.no_grad()
def _evaluation_sums(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> tuple[float, int]:
    """(summed cross-entropy, number correct) of ``model`` on ``x, y``, in eval mode."""
    model.eval()
    loss_sum, correct = 0.0, 0
    for start in range(0, len(y), batch_size):
        logits = model(x[start : start + batch_size])
        target = y[start : start + batch_size]
        loss_sum += F.cross_entropy(logits, target, reduction="sum").item()
        correct += int((logits.argmax(dim=1) == target).sum().item())
    return loss_sum, correct


def _save(
    path: Path,
    identity: Mapping[str, Any],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    rngs: Rngs,
    progress: Progress,
    replica: Replica,
) -> None:
    """Rank 0 writes the checkpoint (a collective: every replica must call it)."""
    dropout_by_rank: list[Any] = []
    if replica.parallel:
        dropout_by_rank = [None] * replica.world_size
        dist.all_gather_object(dropout_by_rank, rngs.dropout.get_state())
    if replica.rank != 0:
        return
    state = {
        "format": CHECKPOINT_FORMAT,
        "identity": dict(identity),
        "model": _unwrap(model).state_dict(),
        "optimizer": optimizer.state_dict(),
        "epoch": progress.epoch,
        "step": progress.step,
        "examples": progress.examples,
        "history": progress.history,
        "own_from": progress.own_from,
        "rng": rngs.state(),
        "noise": progress.noise.state_dict(),
    }
    if replica.parallel:
        state["dropout_by_rank"] = dropout_by_rank
    save_checkpoint(path, state)


def _resume(
    settings: LoopSettings,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    rngs: Rngs,
    replica: Replica,
    noise: NoiseScaleEstimator,
) -> Progress:
    """Restore model, optimizer, RNGs, counters and noise-scale measurements from the checkpoint, if there is one.

    Every replica reads the same file. A replica ``r > 0`` takes its own dropout state
    when the checkpoint was written by as many replicas, else keeps its fresh stream.
    """
    state = load_checkpoint(settings.checkpoint_path) if settings.checkpoint_path is not None else None
    if state is None:
        return Progress(noise=noise)
    if state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(
            f"{settings.checkpoint_path}: checkpoint format {state.get('format')!r}, expected {CHECKPOINT_FORMAT}"
        )
    inherited = state["identity"] != dict(settings.identity)
    if inherited and not settings.inherit:
        raise ValueError(
            f"{settings.checkpoint_path}: written by another trial ({state['identity']}), not this one "
            f"({dict(settings.identity)}); remove it or use another checkpoint_dir"
        )
    _unwrap(model).load_state_dict(state["model"])
    own = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    optimizer.load_state_dict(state["optimizer"])
    if settings.inherit:  # keep this trial's hyperparameters (weight decay...), the state is the checkpoint's
        for group, mine in zip(optimizer.param_groups, own):
            group.update(mine)
    own_dropout = rngs.dropout.get_state()
    rngs.restore(state["rng"])
    if replica.rank > 0:
        by_rank = state.get("dropout_by_rank") or []
        rngs.dropout.set_state(by_rank[replica.rank] if len(by_rank) == replica.world_size else own_dropout)
    progress = Progress(
        epoch=int(state["epoch"]),
        step=int(state["step"]),
        examples=int(state["examples"]),
        history=[dict(m) for m in state["history"]],
        own_from=int(state["epoch"]) + 1 if inherited else int(state.get("own_from", 1)),
        noise=noise,
    )
    if state.get("noise"):
        progress.noise.load_state_dict(state["noise"])
    return progress
