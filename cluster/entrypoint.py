"""What runs on a Dask worker for one trial.

It leases devices, loads the trainer, builds the trial config, runs
``fit(config, reporter)`` and returns a plain-dict outcome. The trainer comes as a
:class:`TrainerShipment`: its entry name, the folders to look for it in (the spec's
folder, the controller's current directory), and, for a function handed over in the
controller's process (defined in a script or a notebook), the function itself,
pickled as Dask pickles callables (cloudpickle: by value for ``__main__``). A trainer error is
an outcome (status ``error`` with its traceback), not a Dask task failure, so
the controller can record it and go on; only the worker dying fails the task.
What the trainer prints goes to the trial's ``stdout.log`` (see :mod:`cluster.trial_output`).
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import math
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import cloudpickle  # Dask's own serializer of callables (a dependency of dask and distributed)
from distributed import get_worker

from .channel import WorkerReporter
from .resources import worker_device_pool
from .trial_output import route_output

__all__ = ["run_trial", "run_trials", "TrainerShipment", "pack_trainer", "unpack_trainer", "disk_error_of"]

DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})  # the storage failed, not the trial


def pack_trainer(fn: Callable[..., Any]) -> bytes:
    """``fn`` pickled as Dask pickles a task's function, with cloudpickle: by value when defined in ``__main__`` (a
    script, a notebook) or nested in another function, else by reference to its importable module."""
    return cloudpickle.dumps(fn)


def unpack_trainer(data: bytes) -> Callable[..., Any]:
    return cloudpickle.loads(data)


@dataclasses.dataclass(frozen=True)
class TrainerShipment:
    """How a trainer travels to a worker: by name (``entry``) with ``folders`` to look in, or by value (``pickled``)."""

    entry: str
    folders: tuple[str, ...] = ()
    pickled: bytes | None = None
    digest: str = ""  # sha256 of ``pickled``: a worker unpickles each trainer once

    @classmethod
    def by_value(cls, entry: str, fn: Callable[..., Any], folders: Iterable[str] = ()) -> TrainerShipment:
        """``TypeError`` (one line) when ``fn`` cannot be pickled, e.g. it holds a lock or an open file in a global."""
        try:
            data = pack_trainer(fn)
        except Exception as exc:  # noqa: BLE001 - pickling raises anything its objects raise
            raise TypeError(f"trainer {entry} cannot be pickled to go to the workers "
                            f"({type(exc).__name__}: {exc})".splitlines()[0]) from exc  # fmt: skip
        return cls(entry, tuple(folders), data, hashlib.sha256(data).hexdigest())

    def load(self) -> Callable[..., Any]:
        """The trainer function, on this worker: its folders go on ``sys.path`` (and ``PYTHONPATH``, for the
        processes a trainer starts) first, so whatever it imports by name is found too."""
        from trainers.api import load_trainer  # by name, at run time only

        _add_folders(self.folders)
        if self.pickled is None:
            return load_trainer(self.entry)
        fn = _UNPICKLED.get(self.digest)
        if fn is None:
            fn = _UNPICKLED[self.digest] = unpack_trainer(self.pickled)
        return fn


_UNPICKLED: dict[str, Callable[..., Any]] = {}  # digest -> trainer, per worker process


def _add_folders(folders: Iterable[str]) -> None:
    missing = [f for f in folders if f not in sys.path]
    if not missing:
        return
    sys.path.extend(missing)
    current = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(current + [f for f in missing if f not in current])


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


def disk_error_of(exc: BaseException) -> str:
    """The errno name when ``exc`` (or an error it was raised from, e.g. inside ``torch.save``) is the
    storage failing (full, over quota, read-only, I/O error); "" otherwise."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in DISK_ERRNOS:
            return errno.errorcode[current.errno]
        current = current.__cause__ or current.__context__
    return ""


def _finite_metrics(metrics: Mapping[str, Any] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in dict(metrics or {}).items():
        try:
            out[str(key)] = float(value)
        except (TypeError, ValueError):
            continue
    return out


def run_trial(
    trainer: TrainerShipment | str, config: dict[str, Any], topic: str, resource: str, width: int
) -> dict[str, Any]:
    """Run one trial on this worker and return its outcome as builtins (``trainer``: a shipment, or an entry name)."""
    from trainers.api import TrialConfig, running_trainer  # at run time only

    started = time.time()
    worker = get_worker()
    reporter = WorkerReporter(topic, int(config["number"]))
    reporter.started()
    devices, pool = _lease_devices(resource, width)
    output = route_output(config.get("log_dir"), int(config["number"]))  # the trainer's prints: its stdout.log
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
        shipment = trainer if isinstance(trainer, TrainerShipment) else TrainerShipment(trainer)
        fit = shipment.load()
        trial_config = TrialConfig.from_dict({**config, "devices": devices})
        with running_trainer(shipment.entry, fit):  # a trainer shipped by value launches its ranks by its entry
            outcome["metrics"] = _finite_metrics(fit(trial_config, reporter))
        outcome["stopped"] = reporter.stopped
    except Exception as exc:  # noqa: BLE001 - any trainer error is a failed trial, kept with its traceback
        outcome.update(status="error", error=_one_line(exc), traceback=traceback.format_exc())
        outcome["disk_error"] = disk_error_of(exc)
        output.write(outcome["traceback"])
    finally:
        output.close()
        if pool is not None:
            pool.release(devices)
    outcome["history"] = [[step, metrics, t] for step, metrics, t in reporter.history]
    outcome["finished"] = time.time()
    if outcome["status"] == "ok" and not all(math.isfinite(v) for v in outcome["metrics"].values()):
        outcome["status"] = "error"
        bad = {k: v for k, v in outcome["metrics"].items() if not math.isfinite(v)}
        outcome["error"] = f"trainer returned non-finite metrics {bad}"
    return outcome


def run_trials(
    batch: list[tuple[TrainerShipment | str, dict[str, Any]]], topic: str, resource: str, width: int
) -> list[dict[str, Any]]:
    """Run several (trainer, config) trials one after another in this task; their outcomes in order."""
    return [run_trial(trainer, config, topic, resource, width) for trainer, config in batch]
