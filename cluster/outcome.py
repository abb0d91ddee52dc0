"""How a trial ended: the :class:`Outcome` its worker builds (or the executor, for a lost or cancelled one)."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

__all__ = ["TrialStatus", "Outcome", "error_type_of"]


class TrialStatus(enum.StrEnum):
    """How a trial's run ended on the cluster (its string value is what logs and records show)."""

    OK = "ok"
    """The trainer returned its metrics."""
    ERROR = "error"
    """The trainer raised (or returned non-finite metrics)."""
    LOST = "lost"
    """Its worker died, or the task could not be run."""
    CANCELLED = "cancelled"
    """The controller cancelled it."""


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How a trial ended, as its worker (or the executor, for a lost one) tells it; a Dask task's result as it is.

    ``status``: see :class:`TrialStatus`. ``error``: one line (``Type: message``), ``error_type``: the exception's
    class (``ValueError``, ``mypkg.errors.BadBatch``), so nothing downstream parses ``error`` to recover it;
    ``traceback`` the whole. ``history`` holds every report as ``(step, metrics, time)``, so none is missing
    when the event stream lagged. ``disk_error``: the errno name (``ENOSPC``, ...) when the trainer failed
    because its storage did (a full disk is the campaign's problem, not the trial's).
    """

    status: TrialStatus
    metrics: Mapping[str, float] = dataclasses.field(default_factory=dict)
    error: str = ""
    traceback: str = ""
    worker: str = ""
    host: str = ""
    pid: int | None = None
    devices: tuple[int, ...] = ()
    started: float | None = None
    finished: float | None = None
    history: tuple[tuple[int, Mapping[str, float], float], ...] = ()
    stopped: bool = False
    disk_error: str = ""
    error_type: str = ""
    oom: bool = False  # the trainer ran out of (device or host) memory
    job_expired: bool = False  # lost because its worker's batch job reached its walltime: the job ended, not the trial
    share: float = 0.0  # of each leased GPU (below 1: packed with other trials)
    peak_memory: int = 0  # bytes: torch.cuda.max_memory_allocated, or the host RSS peak without CUDA
    memory_kind: str = ""  # "cuda" or "rss"
    memory_shared: int = 1  # trials sharing the device when the peak was read (an upper bound when > 1)
    gpu_utilization: float | None = None  # percent, from NVML where it is there
    ranks: tuple[Mapping[str, Any], ...] = ()
    """A trial wider than a worker: each rank's own timings (``rank``, ``host``, ``worker``, ``epoch_seconds``)."""
    values: tuple[float, ...] = ()
    """What a trainer returned instead of a dict of metrics, as an Optuna objective does: a number, or a tuple of
    them (one per objective); the controller takes them as the values of the study's ``[study] metric(s)``."""

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "status", TrialStatus(self.status))
        except ValueError:
            raise ValueError(f"status={self.status!r}: must be one of {', '.join(TrialStatus)}") from None

    def to_message(self) -> dict[str, Any]:
        """This outcome as plain msgpack types (a Dask event carries it): see :meth:`from_message`."""
        out: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "status":
                value = str(value)
            elif field.name == "metrics":
                value = dict(value)
            elif field.name == "history":
                value = [[step, dict(metrics), at] for step, metrics, at in value]
            elif field.name in ("devices", "ranks"):
                value = [dict(v) if isinstance(v, Mapping) else v for v in value]
            out[field.name] = value
        return out

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> Outcome:
        """The outcome :meth:`to_message` wrote (names it does not know are left out)."""
        known = {field.name for field in dataclasses.fields(cls)}
        fields = {name: value for name, value in message.items() if name in known}
        fields["history"] = tuple((int(s), dict(m), float(t)) for s, m, t in fields.get("history", ()))
        fields["devices"] = tuple(int(d) for d in fields.get("devices", ()))
        fields["ranks"] = tuple(dict(r) for r in fields.get("ranks", ()))
        fields["values"] = tuple(float(v) for v in fields.get("values", ()))
        return cls(**fields)

    @property
    def ok(self) -> bool:
        return self.status == TrialStatus.OK

    @property
    def duration(self) -> float | None:
        """Seconds from start to finish on the worker (None when either is unknown)."""
        if self.started is None or self.finished is None:
            return None
        return float(self.finished) - float(self.started)

    @property
    def device_peak(self) -> int:
        """The peak device memory the trial itself measured (bytes), what the packing learns from; 0 for a host
        figure (``rss``), and for a lost trial (the controller's own figures of it, not its device's)."""
        if self.memory_kind != "cuda" or self.status == TrialStatus.LOST:
            return 0
        return self.peak_memory


def error_type_of(exc: BaseException) -> str:
    """The class of ``exc`` as a record names it: ``ValueError`` for a builtin, else ``module.QualName``."""
    cls = type(exc)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
