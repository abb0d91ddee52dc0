"""Dask: start or join a cluster, lease devices, run trials and carry their reports.

The only package that imports ``distributed``. Nothing here imports optuna or
search, and torch only inside a running trial.
"""

from .connect import open_cluster, quiet_dask_logs
from .errors import ClusterError, MissingExtraError
from .executor import DaskExecutor, Finished, Report, Slots, Started, TrialExecutor, TrialRequest
from .packing import GpuPacking
from .options import Backend, ClusterOptions, TLSFiles
from .resources import detect_gpus, slot_resource

__all__ = [
    "Backend",
    "ClusterError",
    "ClusterOptions",
    "DaskExecutor",
    "Finished",
    "GpuPacking",
    "MissingExtraError",
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
