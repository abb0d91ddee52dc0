"""What both integrations do with a framework's metrics: plain floats for ``reporter.report``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["plain_metrics"]


def plain_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Every scalar metric (tensors of one element, numbers) as a float; other values are left out."""
    plain: dict[str, float] = {}
    for name, value in metrics.items():
        if hasattr(value, "numel") and value.numel() == 1:
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        plain[str(name)] = float(value)
    return plain
