"""Dask: start or join a cluster, lease devices, run trials and carry their reports.

The only package that imports ``distributed``. Nothing here imports optuna or
search, and torch only inside a running trial.
"""

from .connect import ClusterError, ClusterOptions, TLSFiles, detect_gpus, open_cluster, quiet_dask_logs, slot_resource
from .executor import DaskExecutor, Finished, Report, Slots, Started, TrialExecutor, TrialRequest

__all__ = [
    "ClusterError",
    "ClusterOptions",
    "DaskExecutor",
    "Finished",
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
