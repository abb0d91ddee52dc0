"""The executor's side of the memory model (:class:`cluster.packing.MemoryModel`, ``gpu_memory = "auto"``): what a
trial is expected to need on its device when it is placed, read from the campaign's trial model (the one instance
the campaign feeds each run's measured device peak, :attr:`cluster.outcome.Outcome.device_peak`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .executor_api import TrialRequest
from .packing import GpuPacking, MemoryModel
from .trial_cost import Resources, TrialPredictions

__all__ = ["MemoryFeed"]


class MemoryFeed:
    """The device memory of the trials one executor places (``gpu_memory = "auto"`` on a GPU cluster; off
    otherwise), from ``costs()``: the trial model the executor reads."""

    def __init__(self, packing: GpuPacking, resource: str, costs: Callable[[], TrialPredictions]) -> None:
        self._on = packing.auto_memory and resource == "GPU"
        self._costs = costs

    def expect(self, requests: Sequence[TrialRequest]) -> int:
        """The device memory ``requests`` are expected to need (bytes), 0 when unknown or off."""
        if not self._on:
            return 0
        memory = MemoryModel(model=self._costs().model)
        return max(memory.estimate(r.config.params, Resources(r.width)) for r in requests)
