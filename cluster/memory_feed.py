"""The executor's side of the memory model (:class:`cluster.packing.MemoryModel`, ``gpu_memory = "auto"``): what a
trial is expected to need on its device when it is placed, and what a finished one measured."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .executor_api import TrialRequest
from .outcome import Outcome
from .packing import GpuPacking, MemoryModel

__all__ = ["MemoryFeed"]


class MemoryFeed:
    """The memory model of one executor, fed the parameters of the trials it places and their measured peaks."""

    def __init__(self, packing: GpuPacking, resource: str) -> None:
        self._on = packing.auto_memory and resource == "GPU"
        self._model = MemoryModel()
        self._params: dict[int, Mapping[str, Any]] = {}  # placed trials' parameters, until they end

    def expect(self, requests: Sequence[TrialRequest]) -> int:
        """The device memory ``requests`` are expected to need (bytes), 0 when unknown or off; each is remembered
        until it ends."""
        for request in requests:
            self._params[request.number] = dict(request.config.params)
        if not self._on:
            return 0
        return max(self._model.estimate(r.config.params) for r in requests)

    def learn(self, number: int, outcome: Outcome | None) -> None:
        """Trial ``number`` ended with ``outcome`` (None: its figures tell nothing of its needs); a measured device
        peak teaches the model."""
        params = self._params.pop(number, {})
        if outcome is not None and outcome.peak_memory and outcome.memory_kind == "cuda":
            self._model.observe(params, outcome.peak_memory)
