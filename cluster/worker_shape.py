"""What one Dask worker started for hypersweep owns: ``GPU=n`` (its node's GPUs) or ``CPU=slots``, and its threads.

One Dask worker per node owns that node's GPUs as the resource ``GPU=n`` and runs enough threads for the trials it
can lease them to; without GPUs it owns ``CPU=slots`` with one thread per slot.
"""

from __future__ import annotations

import os

from .options import ClusterOptions
from .packing import MAX_TRIALS_PER_GPU
from .resources import detect_gpus

__all__ = ["local_shape", "worker_args"]


def worker_args(gpus: int, slots: int, trials_per_gpu: int | None = None) -> list[str]:
    """``dask worker`` flags for one worker per node: ``GPU=gpus`` (if any), else ``CPU=slots``, one thread each.

    A GPU worker's threads follow what its trials ask for: ``trials_per_gpu`` None gives it
    :data:`~cluster.packing.MAX_TRIALS_PER_GPU` threads per GPU, and Dask's ``GPU`` resource caps how many
    trials run at once (two of ``gpus = 0.5`` per GPU, one of ``gpus = 1``); an integer caps them at that many
    per GPU. Idle threads cost nothing: Dask starts them as tasks arrive."""
    if gpus < 0 or slots < 1 or (trials_per_gpu is not None and trials_per_gpu < 1):
        raise ValueError(
            f"gpus={gpus!r}, slots={slots!r}, trials_per_gpu={trials_per_gpu!r}: need gpus >= 0, "
            "slots >= 1 and trials_per_gpu >= 1 (or None: as the trials ask)"
        )
    n = gpus if gpus > 0 else slots
    per_gpu = MAX_TRIALS_PER_GPU if trials_per_gpu is None else trials_per_gpu
    threads = n * per_gpu if gpus > 0 else n
    return ["--nthreads", str(threads), "--resources", f"{'GPU' if gpus > 0 else 'CPU'}={n}"]


def local_shape(options: ClusterOptions) -> tuple[int, dict[str, float]]:
    """The embedded cluster's worker count and each worker's resources (``GPU`` or ``CPU`` slots)."""
    gpus = detect_gpus()
    if gpus:
        # One worker owns all of this node's GPUs and leases them to trials.
        n_workers = options.n_workers or 1
        return n_workers, {"GPU": float(max(1, gpus // n_workers))}
    n_workers = options.n_workers or (os.cpu_count() or 1)
    return n_workers, {"CPU": float(options.slots_per_worker)}
