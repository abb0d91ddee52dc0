"""Out of memory as information: recognise it, and re-run a trial once at half the micro-batch.

A CUDA out-of-memory error (``torch.cuda.OutOfMemoryError``, also raised inside a rank of a
data-parallel trial, where it reaches the launcher as a :class:`trainers.ddp.RankError` whose
traceback names it) says the configuration does not fit the device as it is run, not that it
is wrong. With ``oom_retry = "accumulate"`` the built-in trainer runs it again once with each
replica's share of the global batch split into micro-batches of half the size, gradients
accumulated, so the optimizer sees the same global batch (and the sampler's point stays the same).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["OOM_NAMES", "is_out_of_memory", "halved_micro_batch", "run_with_oom_retry", "free_device_memory"]

OOM_NAMES = ("OutOfMemoryError", "CUDA out of memory")  # how an OOM reads in a rank's traceback


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from) is a device running out of memory."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, torch.cuda.OutOfMemoryError):
            return True
        text = str(getattr(current, "traceback", "") or "")
        if any(name in text for name in OOM_NAMES):
            return True
        current = current.__cause__ or current.__context__
    return False


def halved_micro_batch(batch_size: int, data_parallel: int, current: int | None) -> int | None:
    """Half of each replica's pass (its share of ``batch_size``, or ``current`` micro-batches); None at 1."""
    per_pass = min(current or batch_size // data_parallel, batch_size // data_parallel)
    return per_pass // 2 if per_pass >= 2 else None


def free_device_memory() -> None:
    """Give the allocator's cached blocks back before the re-run (no-op without CUDA)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def run_with_oom_retry(
    run: Callable[[int | None], dict[str, float]],
    micro_batch: int | None,
    batch_size: int,
    data_parallel: int,
    policy: str,
) -> dict[str, float]:
    """``run(micro_batch)``; on an out-of-memory error with ``policy == "accumulate"``, once more at half.

    The re-run's metrics say so: ``oom_retries`` 1 and ``micro_batch`` the size it ran at.
    A second out-of-memory error (or none to halve) is raised as it is: the trial is out of memory.
    """
    try:
        return run(micro_batch)
    except Exception as exc:  # noqa: BLE001 - only an OOM is handled; anything else is raised again
        half = halved_micro_batch(batch_size, data_parallel, micro_batch)
        if policy != "accumulate" or not is_out_of_memory(exc) or half is None:
            raise
        print(
            f"out of memory at micro-batch {micro_batch or batch_size // data_parallel}: "
            f"running again at {half} with gradient accumulation ({exc})".splitlines()[0],
            file=sys.stderr,
        )
    free_device_memory()
    metrics: dict[str, Any] = dict(run(half))
    return {**metrics, "oom_retries": 1.0, "micro_batch": float(half)}
