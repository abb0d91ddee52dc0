"""How trials pack on GPUs: the share each takes (:class:`GpuPacking`), and how much device memory a trial
will need, from what similar trials used (:class:`MemoryModel`, ``gpu_memory = "auto"``).

Each finished trial's peak device memory goes to the trial model (:mod:`cluster.trial_cost`) with its parameters;
a new trial's estimate is the upper end of the model's 90% interval once it has a fit, and before that the largest
peak among its ``neighbours`` nearest (numbers compared on a log scale where positive, anything else equal or not),
times ``margin``. An exact match counts alone. With nothing known the estimate is 0: the trial is placed by its
share alone, and measured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .trial_cost import ONE_SLOT, Basis, Quantity, Resources, TrialCostModel, param_distance

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


class MemoryModel:
    """Peak device memory by configuration, read from a :class:`~cluster.trial_cost.TrialCostModel`;
    ``estimate(params)`` in bytes (0: unknown): the fit's 90% upper bound where there is a fit, else the largest
    of the nearest configurations' peaks (an exact match's alone), times ``margin``."""

    def __init__(self, neighbours: int = 3, margin: float = 1.2, model: TrialCostModel | None = None) -> None:
        if neighbours < 1 or margin < 1.0:
            raise ValueError(f"neighbours={neighbours!r}, margin={margin!r}: need neighbours >= 1 and margin >= 1")
        self.neighbours = neighbours
        self.margin = margin
        self.model = model or TrialCostModel(neighbours=neighbours)

    def __len__(self) -> int:
        return self.model.count(Quantity.MEMORY)

    def observe(self, params: Mapping[str, Any], peak: int, resources: Resources = ONE_SLOT) -> None:
        self.model.observe_memory(None, params, resources, peak)

    def estimate(self, params: Mapping[str, Any], resources: Resources = ONE_SLOT) -> int:
        predicted = self.model.predict(Quantity.MEMORY, params, resources)
        if not predicted.known:
            return 0
        if predicted.basis is Basis.FIT:
            return int(predicted.high * self.margin)
        return int(max(self.model.nearest(Quantity.MEMORY, params, resources)) * self.margin)
