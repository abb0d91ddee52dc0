"""``[space]`` names the controller itself gives a meaning to (the trial's width, the batch size)."""

from __future__ import annotations

__all__ = ["DATA_PARALLEL", "BATCH_SIZE"]

DATA_PARALLEL = "data_parallel"  # a [space] name the controller consumes: the trial's width
BATCH_SIZE = "batch_size"
