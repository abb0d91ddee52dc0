"""Run trials on a Dask cluster and turn what happens into a stream of events.

The controller talks to an executor through four calls — ``submit``, ``stop``,
``events`` and ``slots`` — so the same controller runs on a real cluster
(:class:`DaskExecutor`) or against virtual time in a simulation.
Everything the Dask client's threads see is only put on one queue; the
controller's own thread takes it from there.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol

from distributed import CancelledError, Client, Future
from distributed.client import ClosedClientError, FutureCancelledError

from .channel import request_stop, subscribe_reports
from .connect import ClusterError, worker_slots
from .entrypoint import run_trial

__all__ = ["TrialRequest", "Started", "Report", "Finished", "TrialExecutor", "DaskExecutor", "Slots"]

log = logging.getLogger(__name__)

SLOTS_TTL = 1.0  # seconds between fresh looks at the cluster's workers


@dataclasses.dataclass(frozen=True)
class TrialRequest:
    """One trial to run: the trainer by name, its config as builtins, its width in slots."""

    number: int
    trainer: str
    config: Mapping[str, Any]
    width: int = 1

    def __post_init__(self) -> None:
        if self.width < 1:
            raise ValueError(f"width={self.width!r}: a trial needs at least one slot")


@dataclasses.dataclass(frozen=True)
class Report:
    """An intermediate report sent by a running trial."""

    number: int
    step: int
    metrics: Mapping[str, float]
    time: float
    worker: str


@dataclasses.dataclass(frozen=True)
class Started:
    """A trial began running on a worker (it may have waited in the queue for a slot)."""

    number: int
    time: float
    worker: str


@dataclasses.dataclass(frozen=True)
class Finished:
    """A trial ended; ``outcome['status']`` is ok, error, lost (worker died) or cancelled."""

    number: int
    outcome: Mapping[str, Any]


Event = Started | Report | Finished


@dataclasses.dataclass(frozen=True)
class Slots:
    """The cluster's slot capacity right now."""

    resource: str
    total: int
    widest: int
    workers: int


class TrialExecutor(Protocol):
    """What the controller needs from whatever runs trials."""

    def slots(self) -> Slots: ...

    def submit(self, request: TrialRequest) -> None: ...

    def stop(self, number: int) -> None: ...

    def events(self, timeout: float) -> list[Event]: ...

    def close(self) -> None: ...


class DaskExecutor:
    """Trials as Dask tasks with resource restrictions; reports via the worker event stream."""

    def __init__(self, client: Client, topic: str, resource: str | None = None, lost_after: float = 30.0) -> None:
        self._client = client
        self._lost_after = lost_after
        self._disconnected_since: float | None = None
        self._address = str(getattr(client.scheduler, "address", "") or "the scheduler")
        self._slots: Slots | None = None
        self._slots_at = 0.0
        self._topic = topic
        self._resource = resource or self._infer_resource()
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._futures: dict[int, Future] = {}
        self._lock = threading.Lock()
        subscribe_reports(client, topic, self._on_report)

    def _infer_resource(self) -> str:
        names = {name for res in worker_slots(self._client).values() for name in res}
        return "GPU" if "GPU" in names else "CPU"

    @property
    def resource(self) -> str:
        return self._resource

    def slots(self) -> Slots:
        """The cluster's slots; asked from the scheduler at most once per ``SLOTS_TTL`` seconds.

        ``Client.scheduler_info`` is a round trip carrying every worker's record, so
        asking it on every loop iteration would cost the controller more than a trial.
        """
        self._check_scheduler()
        now = time.monotonic()
        if self._slots is None or now - self._slots_at > SLOTS_TTL:
            per_worker = [int(res.get(self._resource, 0)) for res in worker_slots(self._client).values()]
            self._slots = Slots(self._resource, sum(per_worker), max(per_worker, default=0), len(per_worker))
            self._slots_at = now
        return self._slots

    def wait_for_workers(self, n: int, timeout: float) -> None:
        self._client.wait_for_workers(n, timeout=timeout)

    def submit(self, request: TrialRequest) -> None:
        try:
            future = self._submit(request)
        except ClosedClientError as exc:
            raise ClusterError(f"lost the Dask scheduler at {self._address} ({exc})") from exc
        with self._lock:
            self._futures[request.number] = future
        future.add_done_callback(lambda _f, n=request.number: self._queue.put(("done", n)))

    def _submit(self, request: TrialRequest) -> Future:
        return self._client.submit(
            run_trial,
            request.trainer,
            dict(request.config),
            self._topic,
            self._resource,
            request.width,
            key=f"{self._topic}-trial-{request.number}-{time.monotonic_ns()}",
            resources={self._resource: request.width},
            pure=False,
        )

    def stop(self, number: int) -> None:
        if number in self._futures:
            request_stop(self._client, self._topic, number)

    def running(self) -> tuple[int, ...]:
        with self._lock:
            return tuple(sorted(self._futures))

    def events(self, timeout: float) -> list[Event]:
        """Whatever happened since the last call; waits up to ``timeout`` s for the first event.

        Raises :class:`ClusterError` once the scheduler has been unreachable for ``lost_after`` s.
        """
        self._check_scheduler()
        items: list[tuple[str, Any]] = []
        try:
            items.append(self._queue.get(timeout=max(0.0, timeout)))
            while True:
                items.append(self._queue.get_nowait())
        except queue.Empty:
            pass
        return [self._to_event(kind, payload) for kind, payload in items]

    def _check_scheduler(self) -> None:
        status = self._client.status
        if status == "running":
            self._disconnected_since = None
            return
        now = time.monotonic()
        if self._disconnected_since is None:
            self._disconnected_since = now
        if status in ("closed", "closing") or now - self._disconnected_since > self._lost_after:
            raise ClusterError(f"lost the Dask scheduler at {self._address} (client {status})")

    def close(self) -> None:
        """Cancel what is still running and stop listening."""
        with self._lock:
            futures = list(self._futures.values())
            self._futures.clear()
        if futures:
            try:
                self._client.cancel(futures, force=True)
            except Exception as exc:  # noqa: BLE001 - closing must not raise over a lost scheduler
                log.debug("cancel on close failed: %s", exc)
        try:
            self._client.unsubscribe_topic(self._topic)
        except Exception as exc:  # noqa: BLE001
            log.debug("unsubscribe failed: %s", exc)

    def _on_report(self, msg: dict[str, Any], worker: str) -> None:
        self._queue.put(("report", (msg, worker)))

    def _to_event(self, kind: str, payload: Any) -> Event:
        if kind == "report":
            msg, worker = payload
            if "started" in msg:
                return Started(int(msg["number"]), float(msg["started"]), worker)
            return Report(int(msg["number"]), int(msg["step"]), dict(msg["metrics"]), float(msg["time"]), worker)
        number = int(payload)
        with self._lock:
            future = self._futures.pop(number, None)
        outcome = self._outcome(future)
        if outcome["status"] in ("lost", "cancelled") and self._client.status != "running":
            # The scheduler went away, not the trial: leave it to `resume`, do not record a failure.
            raise ClusterError(f"lost the Dask scheduler at {self._address} (client {self._client.status})")
        return Finished(number, outcome)

    @staticmethod
    def _outcome(future: Future | None) -> dict[str, Any]:
        if future is None:
            return {"status": "cancelled", "error": "cancelled", "metrics": {}}
        try:
            return dict(future.result(timeout=30))
        except (CancelledError, FutureCancelledError) as exc:
            return {"status": "cancelled", "error": f"cancelled: {exc}", "metrics": {}}
        except Exception as exc:  # noqa: BLE001 - KilledWorker, comm errors: the trial's worker is gone
            return {"status": "lost", "error": f"{type(exc).__name__}: {exc}".splitlines()[0], "metrics": {}}
