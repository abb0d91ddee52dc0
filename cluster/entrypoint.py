"""What runs on a Dask worker for one trial.

It leases devices, loads the trainer by name, builds the trial config, runs
``fit(config, reporter)`` and returns a plain-dict outcome. A trainer error is
an outcome (status ``error`` with its traceback), not a Dask task failure, so
the controller can record it and go on; only the worker dying fails the task.
"""

from __future__ import annotations

import math
import os
import socket
import time
import traceback
from collections.abc import Mapping
from typing import Any

from distributed import get_worker

from .channel import WorkerReporter
from .resources import worker_device_pool

__all__ = ["run_trial", "run_trials"]


def _lease_devices(resource: str, width: int) -> tuple[tuple[int, ...], Any]:
    if resource != "GPU":
        return (), None
    worker = get_worker()
    owned = int((worker.state.total_resources or {}).get("GPU", 0))
    pool = worker_device_pool(worker.address, owned)
    return pool.lease(width), pool


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _finite_metrics(metrics: Mapping[str, Any] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in dict(metrics or {}).items():
        try:
            out[str(key)] = float(value)
        except (TypeError, ValueError):
            continue
    return out


def run_trial(trainer: str, config: dict[str, Any], topic: str, resource: str, width: int) -> dict[str, Any]:
    """Run one trial on this worker and return its outcome as builtins."""
    from trainers.api import TrialConfig, load_trainer  # by name, at run time only

    started = time.time()
    worker = get_worker()
    reporter = WorkerReporter(topic, int(config["number"]))
    reporter.started()
    devices, pool = _lease_devices(resource, width)
    outcome: dict[str, Any] = {
        "status": "ok",
        "metrics": {},
        "error": "",
        "traceback": "",
        "worker": worker.address,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "devices": list(devices),
        "started": started,
    }
    try:
        fit = load_trainer(trainer)
        trial_config = TrialConfig.from_dict({**config, "devices": devices})
        outcome["metrics"] = _finite_metrics(fit(trial_config, reporter))
        outcome["stopped"] = reporter.stopped
    except Exception as exc:  # noqa: BLE001 - any trainer error is a failed trial, kept with its traceback
        outcome.update(status="error", error=_one_line(exc), traceback=traceback.format_exc())
    finally:
        if pool is not None:
            pool.release(devices)
    outcome["history"] = [[step, metrics, t] for step, metrics, t in reporter.history]
    outcome["finished"] = time.time()
    if outcome["status"] == "ok" and not all(math.isfinite(v) for v in outcome["metrics"].values()):
        outcome["status"] = "error"
        bad = {k: v for k, v in outcome["metrics"].items() if not math.isfinite(v)}
        outcome["error"] = f"trainer returned non-finite metrics {bad}"
    return outcome


def run_trials(batch: list[tuple[str, dict[str, Any]]], topic: str, resource: str, width: int) -> list[dict[str, Any]]:
    """Run several (trainer, config) trials one after another in this task; their outcomes in order."""
    return [run_trial(trainer, config, topic, resource, width) for trainer, config in batch]
