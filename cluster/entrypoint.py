"""What runs on a Dask worker for one trial.

It leases devices, loads the trainer, builds the trial config, runs
``fit(config, reporter)`` and returns its :class:`~cluster.outcome.Outcome`. The trainer comes as a
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import cloudpickle  # Dask's own serializer of callables (a dependency of dask and distributed)

from .channel import WorkerReporter
from .device_figures import TrialMonitor
from .first_run import FirstRun
from .outcome import Outcome, TrialStatus, error_type_of
from .resources import DevicePool, Lease, physical_ids, worker_device_pool
from .trial_output import make_trial_folders, route_output

__all__ = [
    "run_trial",
    "run_trials",
    "TrainerShipment",
    "pack_trainer",
    "unpack_trainer",
    "disk_error_of",
    "out_of_memory",
    "failure_of",
    "ran_here",
    "returned",
]

OOM_TEXTS = ("OutOfMemoryError", "CUDA out of memory")  # an OOM as a rank's traceback names it
LEASE_WAIT = 600.0  # seconds a trial waits for memory to free on a device before it takes the emptiest anyway
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
            raise TypeError(
                f"trainer {entry} cannot be pickled to go to the workers ({type(exc).__name__}: {exc})".splitlines()[0]
            ) from exc
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


def _lease_devices(
    resource: str, width: int, share: float, memory: int, headroom: float
) -> tuple[Lease | None, DevicePool | None]:
    if resource != "GPU":
        return None, None
    from distributed import get_worker  # on the worker, where distributed is loaded already

    worker = get_worker()
    owned = int((worker.state.total_resources or {}).get("GPU", 0))
    pool = worker_device_pool(worker.address, owned)
    pool.headroom = headroom
    return pool.take(share, width, memory, wait=LEASE_WAIT if memory else 0.0), pool


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from) is memory running out: a CUDA ``OutOfMemoryError``
    (recognised by name: this module never imports torch), a ``MemoryError``, or a rank's error naming one."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        names = {cls.__name__ for cls in type(current).__mro__}
        names.add(str(getattr(current, "child_error_type", "")).rpartition(".")[2])  # a trial's own process
        text = str(getattr(current, "traceback", "") or "")
        if "OutOfMemoryError" in names or "MemoryError" in names or any(n in text for n in OOM_TEXTS):
            return True
        current = current.__cause__ or current.__context__
    return False


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
        for number in getattr(current, "errnos", ()):  # raised in a trial's own process
            if number in DISK_ERRNOS:
                return errno.errorcode[number]
        current = current.__cause__ or current.__context__
    return ""


def failure_of(exc: BaseException) -> dict[str, Any]:
    """The :class:`Outcome` fields of a trial (or a part of one) that raised ``exc``: call it in the ``except``.
    A trial run in its own process (``trainers.ddp.TrialProcessError``) is told by that process's error."""
    oom = out_of_memory(exc)
    error = str(getattr(exc, "child_error", "")) or _one_line(exc)
    child = bool(getattr(exc, "child_error", ""))
    return {
        "error": f"out of memory: {error}" if oom else error,
        "error_type": str(getattr(exc, "child_error_type", "")) or error_type_of(exc),
        "traceback": str(getattr(exc, "traceback", "")) if child else traceback.format_exc(),
        "disk_error": disk_error_of(exc),
        "oom": oom,
    }


def ran_here(address: str, devices: Sequence[int], started: float | None) -> dict[str, Any]:
    """The :class:`Outcome` fields saying where and when a trial (or a part of one) ran: this worker, host and
    process, its devices, its start and now as its end."""
    return {
        "worker": address,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "devices": tuple(devices),
        "started": started,
        "finished": time.time(),
    }


def returned(value: Any) -> tuple[dict[str, float], tuple[float, ...]]:
    """What a trainer returned, as (metrics, values): a dict of metrics (its numbers), or, as an Optuna objective
    returns, a number or a tuple of numbers (the values of the study's objectives); anything else is a
    ``TypeError`` that names it."""
    if value is None or isinstance(value, Mapping):
        return _finite_metrics(value), ()
    from trainers.api import objective_values  # at run time only

    values = objective_values(value)
    if values is not None:
        return {}, values
    raise TypeError(
        f"the trainer returned {_shown(value)} ({type(value).__name__}); a trainer returns a dict of metrics, "
        "a number or a tuple of numbers (one per objective)"
    )


def _shown(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _finite_metrics(metrics: Mapping[str, Any] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in dict(metrics or {}).items():
        try:
            out[str(key)] = float(value)
        except (TypeError, ValueError):
            continue
    return out


def run_trial(
    trainer: TrainerShipment | str,
    config: dict[str, Any],
    topic: str,
    resource: str,
    width: int,
    share: float = 1.0,
    memory: int = 0,
    headroom: float = 0.9,
    first_run: FirstRun | None = None,
) -> Outcome:
    """Run one trial on this worker and return its :class:`Outcome` (``trainer``: a shipment, or an entry name).

    ``share``: of each GPU (below 1: a part of one GPU, packed with other trials); ``memory``: the bytes it is
    expected to need on it (0: unknown), placed within ``headroom`` of the device's memory.

    A trial holding a GPU lease runs in a child process of its own whose ``CUDA_VISIBLE_DEVICES`` is that lease
    (:func:`_in_own_process`); a data-parallel one's ranks each get theirs from their launcher, and a trial
    without devices runs in this worker thread (no process to start).
    """
    from distributed import get_worker  # on the worker, where distributed is loaded already

    from trainers.api import TrialConfig, running_trainer  # at run time only

    from .warm_pool_plugin import WarmPool

    worker = get_worker()
    if first_run is not None:
        first_run.check()  # a task Dask runs again ends here, before it says it started or writes anything
    started = time.time()  # after the check, whose wait is no part of the run (nor of its device's tenancy)
    reporter = WorkerReporter(topic, int(config["number"]))
    reporter.started()
    lease, pool = _lease_devices(resource, width, share, memory, headroom)
    devices = lease.ids if lease is not None else ()
    alone = bool(devices) and not _ranked(config)  # its own process, which sees only its devices
    if alone or _ranked(config):
        WarmPool.attach(worker)  # its process (its ranks') from this worker's warm pool
    monitor = TrialMonitor(
        () if alone else devices,
        physical_ids(devices),
        on_memory=reporter.memory,
        tenants=(lambda: max(pool.tenants()[d] for d in devices)) if pool and devices and not alone else None,
    )
    reporter.figures = lambda: monitor.peak
    make_trial_folders(config)  # for its checkpoints; the controller does not make it
    output = route_output(config.get("log_dir"), int(config["number"]))  # the trainer's prints: its stdout.log
    metrics: dict[str, float] = {}
    values: tuple[float, ...] = ()
    failure: dict[str, Any] = {}
    figures: dict[str, Any] = {}
    stopped = False
    try:
        shipment = trainer if isinstance(trainer, TrainerShipment) else TrainerShipment(trainer)
        fit = shipment.load()
        visible = ",".join(str(d) for d in physical_ids(devices))
        with running_trainer(shipment.entry, fit):  # a trainer shipped by value launches its ranks by its entry
            if alone:
                metrics, values = returned(_in_own_process(shipment.entry, config, devices, visible, reporter, monitor))
            else:
                monitor.start()
                trial_config = TrialConfig.from_dict({**config, "devices": devices, "visible_devices": visible})
                metrics, values = returned(fit(trial_config, reporter))
        stopped = reporter.stopped
    except Exception as exc:  # noqa: BLE001 - any trainer error is a failed trial, kept with its traceback
        failure = failure_of(exc)
        output.write(failure["traceback"])
    finally:
        figures = monitor.stop()
        output.close()
        if pool is not None and lease is not None:
            pool.give(lease)
    bad = {k: v for k, v in metrics.items() if not math.isfinite(v)}
    if bad and not failure:
        failure = {"error": f"trainer returned non-finite metrics {bad}"}
    outcome = Outcome(
        TrialStatus.ERROR if failure else TrialStatus.OK,
        metrics,
        **ran_here(worker.address, devices, started),
        history=tuple((step, m, t) for step, m, t in reporter.history),
        stopped=stopped,
        share=share if devices else 0.0,
        values=values,
        **figures,
        **failure,
    )
    reporter.finished(outcome)
    return outcome


def _ranked(config: Mapping[str, Any]) -> bool:
    """Whether the trial runs as data-parallel ranks, which its launcher starts each in a process of its own."""
    return int(config.get("data_parallel", 1) or 1) > 1


def _in_own_process(
    entry: str,
    config: Mapping[str, Any],
    devices: tuple[int, ...],
    visible: str,
    reporter: WorkerReporter,
    monitor: TrialMonitor,
) -> Mapping[str, Any] | tuple[float, ...]:
    """Run the trial in a child process whose ``CUDA_VISIBLE_DEVICES`` is its lease (``visible``), so that inside
    it the devices are ``0..n-1`` (``cuda:0`` the first) and a trainer sees no other GPU; the trial's metrics (or
    the objectives' values it returned).

    The child is the data-parallel launcher's (:func:`trainers.ddp.launch_solo`): reports, stop requests, output
    and its CUDA memory peaks come back over its channel; ``monitor`` follows its RSS.
    """
    from trainers.api import TrialConfig  # at run time only
    from trainers.ddp import launch_solo

    own = TrialConfig.from_dict({**config, "devices": list(range(len(devices))), "visible_devices": visible})

    def started(pids: Any) -> None:
        monitor.follow(int(pids[0]))
        monitor.start()

    return launch_solo(entry, own, reporter, visible, on_start=started, on_memory=monitor.device_peak)


def run_trials(
    batch: list[tuple[TrainerShipment | str, dict[str, Any]]],
    topic: str,
    resource: str,
    width: int,
    share: float = 1.0,
    memory: int = 0,
    headroom: float = 0.9,
    first_run: FirstRun | None = None,
) -> list[Outcome]:
    """Run several (trainer, config) trials one after another in this task; their outcomes in order."""
    return [
        run_trial(trainer, config, topic, resource, width, share, memory, headroom, first_run)
        for trainer, config in batch
    ]
