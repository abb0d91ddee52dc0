"""How trials pack on GPUs: the share each takes (:class:`GpuPacking`), and how much device memory a trial
will need, from what similar trials used (:class:`MemoryModel`, ``gpu_memory = "auto"``).

Each finished trial's peak device memory is kept with its parameters; a new trial's estimate
is the largest peak among its ``neighbours`` nearest (numbers compared on a log scale where
positive, anything else equal or not), times ``margin``. An exact match counts alone. With
nothing known the estimate is 0: the trial is placed by its share alone, and measured.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["GpuPacking", "MemoryModel", "param_distance", "MAX_TRIALS_PER_GPU", "thread_shortfall"]

#: The most trials one GPU may hold (``[trainer] gpus = 1/k``, k <= this): a GPU worker that follows what its
#: trials ask for runs this many threads per GPU, and Dask's ``GPU`` resource caps how many run at once.
MAX_TRIALS_PER_GPU = 64


@dataclasses.dataclass(frozen=True)
class GpuPacking:
    """How trials take GPUs: ``gpus`` per trial slot (1/k: k trials share a GPU; an integer: whole GPUs),
    ``auto_memory`` (place by the memory similar trials used), ``headroom`` (of a device's memory)."""

    gpus: float = 1.0
    auto_memory: bool = False
    headroom: float = 0.9

    def __post_init__(self) -> None:
        if not self.gpus > 0 or (self.gpus >= 1 and not float(self.gpus).is_integer()):
            raise ValueError(f"gpus={self.gpus!r}: must be an integer >= 1 or a fraction 1/k")
        if self.gpus < 1 and abs(round(1 / self.gpus) * self.gpus - 1) > 1e-6:
            raise ValueError(f"gpus={self.gpus!r}: a fraction must be 1/k (0.5, 0.25, ...), so k trials fill a GPU")
        if not 0 < self.headroom <= 1:
            raise ValueError(f"headroom={self.headroom!r}: must be in (0, 1]")

    @property
    def trials_per_gpu(self) -> int:
        """How many trials one GPU holds (1 for whole GPUs): a GPU worker needs that many threads per GPU."""
        return round(1 / self.gpus) if self.gpus < 1 else 1


def thread_shortfall(info: Mapping[str, Any], packing: GpuPacking) -> list[str]:
    """One line per GPU worker in ``info`` (a ``scheduler_info()``) with fewer threads than its GPUs hold trials of
    ``packing``'s share: Dask runs a task per thread, so such a worker runs fewer trials at once than its ``GPU``
    resource allows, with no other sign of it."""
    lines = []
    for address, worker in dict(info.get("workers") or {}).items():
        gpus = float((worker.get("resources") or {}).get("GPU", 0))
        fits = int(gpus / packing.gpus + 1e-9)
        threads = int(worker.get("nthreads") or 0)
        if gpus and 0 < threads < fits:
            lines.append(
                f"worker {worker.get('name', address)} ({address}) owns GPU={gpus:g} but runs {threads} thread(s): "
                f"{threads} trial(s) of gpus = {packing.gpus:g} at once there, not {fits}; start it with "
                f"'hypersweep worker' (its threads follow the trials) or 'dask worker --nthreads {fits}'"
            )
    return lines


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def param_distance(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    """How far two configurations are: per parameter, 1 for a different label or a missing one, for
    numbers their distance in doublings (log2) where both are positive, else their relative difference."""
    total = 0.0
    for key in set(a) | set(b):
        x, y = a.get(key), b.get(key)
        nx, ny = _number(x), _number(y)
        if nx is not None and ny is not None:
            if nx > 0 and ny > 0:
                total += abs(math.log2(nx) - math.log2(ny))
            else:
                total += abs(nx - ny) / (abs(nx) + abs(ny) or 1.0)
        else:
            total += 0.0 if x == y else 1.0
    return total


class MemoryModel:
    """Peak device memory by configuration; ``estimate(params)`` in bytes (0: unknown)."""

    def __init__(self, neighbours: int = 3, margin: float = 1.2) -> None:
        if neighbours < 1 or margin < 1.0:
            raise ValueError(f"neighbours={neighbours!r}, margin={margin!r}: need neighbours >= 1 and margin >= 1")
        self.neighbours = neighbours
        self.margin = margin
        self._seen: list[tuple[dict[str, Any], int]] = []

    def __len__(self) -> int:
        return len(self._seen)

    def observe(self, params: Mapping[str, Any], peak: int) -> None:
        if peak > 0:
            self._seen.append((dict(params), int(peak)))

    def estimate(self, params: Mapping[str, Any]) -> int:
        if not self._seen:
            return 0
        ranked = sorted(self._seen, key=lambda seen: param_distance(params, seen[0]))
        exact = [peak for seen, peak in ranked if param_distance(params, seen) == 0.0]
        peaks = exact or [peak for _, peak in ranked[: self.neighbours]]
        return int(max(peaks) * self.margin)
