"""``[trainer]`` GPU keys: how much of a GPU a trial takes, how memory packs trials, what an OOM does.

``gpus``: an integer >= 1 (whole GPUs per trial slot) or a fraction ``1/k`` (k trials share
one GPU: 0.5, 0.25, 0.125, ...). ``gpu_memory``: ``"none"`` (the fraction alone decides) or
``"auto"`` (later trials are placed by the peak device memory similar trials used, never
above ``gpu_headroom`` of a device's memory). ``oom_retry``: ``"none"`` or ``"accumulate"``
(the built-in trainer re-runs an out-of-memory trial once at half the micro-batch with
gradient accumulation, the global batch unchanged).
"""

from __future__ import annotations

import math
from typing import Any

from cluster.packing import MAX_TRIALS_PER_GPU, GpuPacking
from search.spec.table import SpecTable

__all__ = ["GPU_KEYS", "GPU_MEMORY", "OOM_RETRY", "MAX_TRIALS_PER_GPU", "check_gpus", "gpu_fields", "gpu_packing"]

GPU_KEYS = ("gpus", "gpu_memory", "gpu_headroom", "oom_retry")
GPU_MEMORY = ("none", "auto")
OOM_RETRY = ("none", "accumulate")
MAX_GPUS = 1024


def check_gpus(value: Any) -> float | None:
    """``value`` as a GPU amount when it is an integer 1..MAX_GPUS or exactly ``1/k`` (k = 2..64); else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    if value >= 1:
        return float(value) if float(value).is_integer() and value <= MAX_GPUS else None
    k = round(1 / value)
    return 1.0 / k if 2 <= k <= MAX_TRIALS_PER_GPU and math.isclose(value * k, 1.0, rel_tol=1e-6) else None


def gpu_packing(spec: Any) -> GpuPacking:
    """The executor's packing for a campaign spec's ``[trainer]`` GPU keys."""
    t = spec.trainer
    return GpuPacking(t.gpus, t.gpu_memory == "auto", t.gpu_headroom)


def gpu_fields(t: SpecTable) -> dict[str, Any]:
    """The ``TrainerSpec`` fields these keys give, validated (one-line ``SpecError`` naming the value and rule)."""
    value = t.data.get("gpus", 1)
    gpus = check_gpus(value)
    if gpus is None:
        raise t.error(
            "gpus",
            f"must be an integer from 1 to {MAX_GPUS} or a fraction 1/k (0.5, 0.25, ..., "
            f"k <= {MAX_TRIALS_PER_GPU}: k trials share one GPU), got {value!r}",
        )
    headroom = t.float("gpu_headroom", 0.9, minimum=0.0)
    if not 0.0 < headroom <= 1.0:
        raise t.error(
            "gpu_headroom",
            f"must be in (0, 1], the fraction of a GPU's memory packed trials may fill, got {headroom:g}",
        )
    return {
        "gpus": gpus,
        "gpu_memory": t.choice("gpu_memory", GPU_MEMORY, "none"),
        "gpu_headroom": headroom,
        "oom_retry": t.choice("oom_retry", OOM_RETRY, "none"),
    }
