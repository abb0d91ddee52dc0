"""This machine's devices, and concrete device leases on one worker.

``detect_gpus`` counts the GPUs a worker here would own. A worker that owns
``GPU=n`` holds a pool of device ids; each trial leases the ids it runs on and
gives them back when it ends. The scheduler's resource counters decide
*whether* a trial may start on a worker; the pool decides *which* devices it
gets, so two trials never share a GPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Sequence

__all__ = ["DevicePool", "LeaseError", "detect_gpus", "slot_resource", "worker_device_pool"]


def detect_gpus() -> int:
    """Number of visible NVIDIA GPUs, without importing torch (``nvidia-smi -L``)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() not in ("", "-1")])
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return 0
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def slot_resource(n_gpus: int) -> str:
    """The resource name trials ask for: ``GPU`` where there are GPUs, else ``CPU`` slots."""
    return "GPU" if n_gpus > 0 else "CPU"


class LeaseError(RuntimeError):
    """More devices were asked for than the pool has free."""


class DevicePool:
    """A thread-safe pool of device ids; ``lease(k)`` takes the k lowest free ids."""

    def __init__(self, device_ids: Sequence[int]) -> None:
        if len(set(device_ids)) != len(device_ids):
            raise ValueError(f"device_ids={list(device_ids)!r}: ids must be distinct")
        self._all = tuple(int(d) for d in device_ids)
        self._free = set(self._all)
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return len(self._all)

    def free(self) -> tuple[int, ...]:
        with self._lock:
            return tuple(sorted(self._free))

    def lease(self, k: int) -> tuple[int, ...]:
        if k < 0:
            raise ValueError(f"k={k!r}: must be >= 0")
        with self._lock:
            if k > len(self._free):
                raise LeaseError(f"asked for {k} devices, {len(self._free)} of {len(self._all)} free")
            ids = tuple(sorted(self._free)[:k])
            self._free.difference_update(ids)
            return ids

    def release(self, ids: Sequence[int]) -> None:
        with self._lock:
            unknown = set(ids) - set(self._all)
            if unknown:
                raise ValueError(f"ids {sorted(unknown)} do not belong to this pool {list(self._all)}")
            self._free.update(ids)


_pools: dict[str, DevicePool] = {}
_pools_lock = threading.Lock()


def _visible_device_ids(count: int) -> tuple[int, ...]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        # Ids are indices into the visible set, which is what CUDA device numbers mean here.
        n = len([d for d in visible.split(",") if d.strip() not in ("", "-1")])
        return tuple(range(min(n, count)))
    return tuple(range(count))


def worker_device_pool(worker_key: str, gpu_count: int) -> DevicePool:
    """The per-process pool for the worker ``worker_key`` owning ``gpu_count`` GPUs."""
    with _pools_lock:
        pool = _pools.get(worker_key)
        if pool is None:
            pool = DevicePool(_visible_device_ids(gpu_count))
            _pools[worker_key] = pool
        return pool
