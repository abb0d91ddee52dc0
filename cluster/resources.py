"""This machine's devices, and concrete device leases on one worker.

``detect_gpus`` counts the GPUs a worker here would own. A worker that owns
``GPU=n`` holds a pool of device ids; each trial leases the ids it runs on and
gives them back when it ends. The scheduler's resource counters decide
*whether* a trial may start on a worker; the pool decides *which* devices it
gets: whole devices, or a share of one (``gpus = 0.25``: four trials on a GPU), placed by the memory
similar trials used where that is known.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence

__all__ = [
    "DevicePool",
    "Lease",
    "LeaseError",
    "device_memory",
    "detect_gpus",
    "physical_ids",
    "slot_resource",
    "worker_device_pool",
]


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


def device_memory(physical: Sequence[int]) -> dict[int, int]:
    """Total memory (bytes) of each physical GPU id, from ``nvidia-smi``; {} where there is none to ask."""
    exe = shutil.which("nvidia-smi")
    if exe is None or not physical:
        return {}
    command = [exe, "--query-gpu=index,memory.total", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    totals: dict[int, int] = {}
    for line in out.splitlines():
        index, _, mib = line.partition(",")
        if index.strip().isdigit() and mib.strip().isdigit():
            totals[int(index)] = int(mib) * 2**20
    return {i: totals[p] for i, p in enumerate(physical) if p in totals}


def slot_resource(n_gpus: int) -> str:
    """The resource name trials ask for: ``GPU`` where there are GPUs, else ``CPU`` slots."""
    return "GPU" if n_gpus > 0 else "CPU"


class LeaseError(RuntimeError):
    """More devices were asked for than the pool has free."""


SHARE_EPS = 1e-9  # four leases of 0.25 fill a device exactly, whatever the float rounding


@dataclasses.dataclass(frozen=True)
class Lease:
    """Devices held by one trial: ``ids``; ``share`` of each (1.0: whole devices); ``memory`` bytes it expects
    to use on each (0: unknown)."""

    ids: tuple[int, ...]
    share: float = 1.0
    memory: int = 0


class DevicePool:
    """A thread-safe pool of device ids that trials lease whole or in shares.

    ``lease(k)`` takes the k lowest wholly free ids. ``take(share, memory=...)`` with a share
    below 1 (``1/k``: k trials per device) puts the trial on one device with that much share
    left and, when ``memory`` bytes are expected and the device's capacity is known
    (``capacity``: bytes per id), where the expected memory of its tenants stays within
    ``headroom`` of the capacity; of those, the least loaded (trials spread before they pack).
    A device with no tenant always fits, so a trial bigger than any estimate still runs alone.
    The scheduler's ``GPU`` counters decide *whether* a trial starts on this worker; the pool
    decides *which* device it gets, and waits (``take(..., wait=s)``) while memory rules it out.
    """

    def __init__(
        self, device_ids: Sequence[int], capacity: Mapping[int, int] | None = None, headroom: float = 0.9
    ) -> None:
        if len(set(device_ids)) != len(device_ids):
            raise ValueError(f"device_ids={list(device_ids)!r}: ids must be distinct")
        if not 0.0 < headroom <= 1.0:
            raise ValueError(f"headroom={headroom!r}: must be in (0, 1], the fraction of a device's memory to fill")
        self._all = tuple(int(d) for d in device_ids)
        self._used = {d: 0.0 for d in self._all}  # share leased
        self._memory = {d: 0 for d in self._all}  # expected bytes leased
        self._tenants = {d: 0 for d in self._all}
        self.capacity = {int(d): int(b) for d, b in (capacity or {}).items()}
        self.headroom = headroom
        self._changed = threading.Condition()

    @property
    def size(self) -> int:
        return len(self._all)

    def free(self) -> tuple[int, ...]:
        """Ids with no tenant at all."""
        with self._changed:
            return tuple(d for d in self._all if self._tenants[d] == 0)

    def tenants(self) -> dict[int, int]:
        """Trials on each device now."""
        with self._changed:
            return dict(self._tenants)

    def lease(self, k: int) -> tuple[int, ...]:
        """The ``k`` lowest wholly free ids (``LeaseError`` when fewer are free)."""
        if k < 0:
            raise ValueError(f"k={k!r}: must be >= 0")
        return self.take(1.0, k).ids

    def release(self, ids: Sequence[int]) -> None:
        """Give back whole devices taken with :meth:`lease`."""
        self.give(Lease(tuple(ids)))

    def take(self, share: float = 1.0, width: int = 1, memory: int = 0, wait: float = 0.0) -> Lease:
        """``width`` whole devices (``share >= 1``: ``width * share`` of them) or, below 1, a share of one.

        ``wait``: seconds to wait for memory to free on a device before taking the least loaded one anyway
        (the scheduler's counters already admitted the trial; it may then run out of memory, which is
        recorded as such). ``LeaseError`` when the shares themselves are not there.
        """
        if share <= 0 or (share < 1 and width != 1):
            raise ValueError(f"share={share!r}, width={width!r}: a share below 1 is one device's part, width 1")
        deadline = time.monotonic() + max(0.0, wait)
        with self._changed:
            while True:
                lease = self._try_take(share, width, memory, strict=True)
                left = deadline - time.monotonic()
                if lease is not None or left <= 0:
                    break
                self._changed.wait(min(left, 1.0))
            lease = lease or self._try_take(share, width, memory, strict=False)
            if lease is None:
                raise LeaseError(self._busy_message(share, width))
            for d in lease.ids:
                self._used[d] += min(share, 1.0)
                self._memory[d] += lease.memory
                self._tenants[d] += 1
            return lease

    def give(self, lease: Lease) -> None:
        """Give back what :meth:`take` leased."""
        with self._changed:
            unknown = set(lease.ids) - set(self._all)
            if unknown:
                raise ValueError(f"ids {sorted(unknown)} do not belong to this pool {list(self._all)}")
            for d in lease.ids:
                self._used[d] = max(0.0, self._used[d] - min(lease.share, 1.0))
                self._memory[d] = max(0, self._memory[d] - lease.memory)
                self._tenants[d] = max(0, self._tenants[d] - 1)
            self._changed.notify_all()

    def _try_take(self, share: float, width: int, memory: int, strict: bool) -> Lease | None:
        if share >= 1:
            count = width * int(round(share))
            empty = [d for d in self._all if self._tenants[d] == 0]
            return Lease(tuple(empty[:count]), 1.0, memory) if len(empty) >= count else None
        fits = [d for d in self._all if self._used[d] + share <= 1.0 + SHARE_EPS]
        if strict:
            fits = [d for d in fits if self._memory_fits(d, memory)]
        if not fits:
            return None
        best = min(fits, key=lambda d: (self._used[d], self._memory[d], d))
        return Lease((best,), share, memory)

    def _memory_fits(self, device: int, memory: int) -> bool:
        capacity = self.capacity.get(device, 0)
        if memory <= 0 or capacity <= 0 or self._tenants[device] == 0:
            return True
        return self._memory[device] + memory <= self.headroom * capacity

    def _busy_message(self, share: float, width: int) -> str:
        used = ", ".join(f"{d}: {self._used[d]:g}" for d in self._all)
        want = f"{width * share:g} whole devices" if share >= 1 else f"a {share:g} share of one device"
        return f"asked for {want}; shares in use per device: {used or 'no devices'}"


_pools: dict[str, DevicePool] = {}
_pools_lock = threading.Lock()


def _visible_device_ids(count: int) -> tuple[int, ...]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        # Ids are indices into the visible set, which is what CUDA device numbers mean here.
        n = len([d for d in visible.split(",") if d.strip() not in ("", "-1")])
        return tuple(range(min(n, count)))
    return tuple(range(count))


def physical_ids(devices: Sequence[int]) -> tuple[int, ...]:
    """Leased ids (indices into this process's visible devices) as physical ids, for ``CUDA_VISIBLE_DEVICES``
    and NVML, which count every device of the machine."""
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if not visible:
        return tuple(devices)
    return tuple(int(visible[d]) if d < len(visible) and visible[d].isdigit() else d for d in devices)


def worker_device_pool(worker_key: str, gpu_count: int) -> DevicePool:
    """The per-process pool for the worker ``worker_key`` owning ``gpu_count`` GPUs."""
    with _pools_lock:
        pool = _pools.get(worker_key)
        if pool is None:
            ids = _visible_device_ids(gpu_count)
            pool = DevicePool(ids, capacity=device_memory(physical_ids(ids)))
            _pools[worker_key] = pool
        return pool
