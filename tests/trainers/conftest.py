"""Fixtures shared by the trainer tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from trainers.api import TrialConfig

MakeConfig = Callable[..., TrialConfig]


@pytest.fixture
def make_config() -> MakeConfig:
    """Build a CPU digits trial config: ``make_config({"lr": 0.1}, epochs=5)``."""

    def make(params: dict[str, Any] | None = None, **fields: Any) -> TrialConfig:
        defaults: dict[str, Any] = {"study": "test", "number": 0, "seed": 7, "epochs": 3, "device": "cpu"}
        return TrialConfig(params=params if params is not None else {"lr": 0.05}, **{**defaults, **fields})

    return make


def without_timing(metrics: dict[str, float]) -> dict[str, float]:
    """``metrics`` less ``epoch_seconds``, the one entry that differs between identical runs."""
    return {k: v for k, v in metrics.items() if k != "epoch_seconds"}


@pytest.fixture(name="without_timing")
def _without_timing() -> Callable[[dict[str, float]], dict[str, float]]:
    return without_timing
