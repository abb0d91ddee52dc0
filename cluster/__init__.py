"""Dask: start or join a cluster, lease devices, run trials and carry their reports.

The only package that imports ``distributed``. Nothing here imports optuna or
search, and torch only inside a running trial.
"""

from typing import TYPE_CHECKING, Any

from .connect import open_cluster, quiet_dask_logs
from .errors import ClusterError, MissingExtraError, SettingError
from .options import Backend, ClusterOptions, TLSFiles
from .packing import GpuPacking
from .resources import detect_gpus, slot_resource

if TYPE_CHECKING:
    from .executor import DaskExecutor, Finished, Report, Slots, Started, TrialExecutor, TrialRequest

# ``distributed`` loads with the executor, on first use of one of these names: reading a spec or a campaign
# folder (``hypersweep check``, ``status``) never imports it.
_FROM_EXECUTOR = ("DaskExecutor", "Finished", "Report", "Slots", "Started", "TrialExecutor", "TrialRequest")

__all__ = [
    "Backend",
    "ClusterError",
    "ClusterOptions",
    "DaskExecutor",
    "Finished",
    "GpuPacking",
    "MissingExtraError",
    "SettingError",
    "Report",
    "Slots",
    "Started",
    "TLSFiles",
    "TrialExecutor",
    "TrialRequest",
    "detect_gpus",
    "open_cluster",
    "quiet_dask_logs",
    "slot_resource",
]


def __getattr__(name: str) -> Any:
    if name in _FROM_EXECUTOR:
        from . import executor

        return getattr(executor, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
