"""The epoch loop: shuffle, minibatch steps with a per-step learning rate, evaluate, report, checkpoint.

Everything random comes from :class:`Rngs`, whose state is checkpointed with the
model and optimizer, so a run resumed from a checkpoint ends with bit-for-bit the
same metrics (on CPU) as one that was never interrupted.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from trainers.api import Reporter
from trainers.checkpoint import load_checkpoint, save_checkpoint
from trainers.data import Dataset

__all__ = ["LoopSettings", "Rngs", "Progress", "Schedule", "make_rngs", "train", "evaluate", "CHECKPOINT_NAME"]

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

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "checkpoint_every", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r}: must be >= 1")


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


def make_rngs(seed: int, device: torch.device) -> tuple[torch.Generator, Rngs]:
    """A CPU generator for weight init, and the loop's streams, all derived from ``seed``."""
    init, shuffle, dropout, numpy_seq = np.random.SeedSequence(seed).spawn(4)

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


Schedule = Callable[[int], float]


def train(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: Schedule,
    data: Dataset,
    settings: LoopSettings,
    rngs: Rngs,
    reporter: Reporter,
) -> dict[str, float]:
    """Train from the checkpoint if there is one, else from scratch; return the last metrics."""
    progress = _resume(settings, model, optimizer, rngs)
    for epoch in range(progress.epoch, settings.epochs):
        started = time.perf_counter()
        train_loss, lr = _train_epoch(model, optimizer, schedule, data, settings.batch_size, rngs, progress)
        val_loss, val_accuracy = evaluate(model, data.x_val, data.y_val, settings.eval_batch_size)
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
        progress.epoch = epoch + 1
        progress.history.append(metrics)
        reporter.report(epoch + 1, metrics)
        if settings.checkpoint_path is not None and progress.epoch % settings.checkpoint_every == 0:
            _save(settings.checkpoint_path, settings.identity, model, optimizer, rngs, progress)
        if reporter.should_stop():
            break
    return dict(progress.history[-1])


def _train_epoch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: Schedule,
    data: Dataset,
    batch_size: int,
    rngs: Rngs,
    progress: Progress,
) -> tuple[float, float]:
    """One pass over the shuffled training set; returns (mean training loss, last lr)."""
    model.train()
    n = len(data.y_train)
    order = torch.randperm(n, generator=rngs.shuffle).to(data.x_train.device)
    loss_sum, lr = 0.0, float("nan")
    for start in range(0, n, batch_size):
        idx = order[start : start + batch_size]
        lr = float(schedule(progress.step))
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss = F.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
        loss_value = loss.item()
        if not math.isfinite(loss_value):
            raise FloatingPointError(
                f"training loss is {loss_value} at epoch {progress.epoch + 1}, step {progress.step} (lr={lr:g})"
            )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        progress.step += 1
        progress.examples += len(idx)
        loss_sum += loss_value * len(idx)
    return loss_sum / n, lr


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1024) -> tuple[float, float]:
    """(mean cross-entropy, accuracy) of ``model`` on ``x, y``, in eval mode."""
    model.eval()
    loss_sum, correct = 0.0, 0
    for start in range(0, len(y), batch_size):
        logits = model(x[start : start + batch_size])
        target = y[start : start + batch_size]
        loss_sum += F.cross_entropy(logits, target, reduction="sum").item()
        correct += int((logits.argmax(dim=1) == target).sum().item())
    return loss_sum / len(y), correct / len(y)


def _save(
    path: Path,
    identity: Mapping[str, Any],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    rngs: Rngs,
    progress: Progress,
) -> None:
    save_checkpoint(
        path,
        {
            "format": CHECKPOINT_FORMAT,
            "identity": dict(identity),
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "epoch": progress.epoch,
            "step": progress.step,
            "examples": progress.examples,
            "history": progress.history,
            "rng": rngs.state(),
        },
    )


def _resume(settings: LoopSettings, model: nn.Module, optimizer: torch.optim.Optimizer, rngs: Rngs) -> Progress:
    """Restore model, optimizer, RNGs and counters from the checkpoint, if there is one."""
    state = load_checkpoint(settings.checkpoint_path) if settings.checkpoint_path is not None else None
    if state is None:
        return Progress()
    if state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(
            f"{settings.checkpoint_path}: checkpoint format {state.get('format')!r}, expected {CHECKPOINT_FORMAT}"
        )
    if state["identity"] != dict(settings.identity):
        raise ValueError(
            f"{settings.checkpoint_path}: written by another trial ({state['identity']}), not this one "
            f"({dict(settings.identity)}); remove it or use another checkpoint_dir"
        )
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    rngs.restore(state["rng"])
    return Progress(
        epoch=int(state["epoch"]),
        step=int(state["step"]),
        examples=int(state["examples"]),
        history=[dict(m) for m in state["history"]],
    )
