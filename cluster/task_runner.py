"""Trials as Dask tasks of their own: one trial, or a batch of short ones run one after another, per task.

The road for trials wider than one slot (on one worker), and for every trial where slot runners are off or retired
(:mod:`cluster.runner_pool`). A trial's outcome comes up the event stream (its worker sends it after its reports);
the task's result carries it too, for a trial whose message is late or lost, and its error tells a lost worker or a
cancel.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .entrypoint import TrainerShipment, run_trial, run_trials
from .executor_api import TrialRequest
from .executor_queue import EventQueue, TaskDone
from .first_run import FirstRun, RanBefore, trial_key
from .outcome import Outcome, TrialStatus

if TYPE_CHECKING:
    from distributed import Client, Future

__all__ = ["run_once", "TaskRunner"]


def run_once(key: str, run: Callable[..., Any], numbers: list[int], *args: Any) -> Any:
    """On a worker: ``run(*args)`` the first time task ``key`` starts; a lost outcome for each trial after that.

    Dask runs a task again, on another worker, when the worker running it dies; a trial is attempted at most
    ``1 + max_retries`` times on any cluster because only the controller retries (:mod:`cluster.first_run`:
    ``run`` checks, just before it calls the trainer, and a task that ran before ends at once as lost).
    """
    try:
        return run(*args, first_run=FirstRun(key))
    except RanBefore:
        error = "its worker died while it ran (Dask started the task again; only the controller retries)"
        lost = [Outcome(TrialStatus.LOST, error=error) for _ in numbers]
        return lost if run is run_trials else lost[0]


class TaskRunner:
    """The trials of one executor that run as tasks of their own (its client, topic, resource, queue, shipments)."""

    def __init__(
        self,
        client: Client,
        topic: str,
        resource: str,
        events: EventQueue,
        ship: Callable[[Any], TrainerShipment],
    ) -> None:
        self._client, self._topic, self._resource = client, topic, resource
        self._events, self._ship = events, ship
        self._lock = threading.Lock()
        self._futures: dict[int, Future] = {}
        self._told: dict[int, tuple[float, float | None]] = {}  # each trial's last run told by its task's result

    def submit(self, requests: Sequence[TrialRequest], share: float, memory: int, headroom: float) -> None:
        """Run ``requests`` (all of one width) in one task on ``width * share`` of the resource; ``memory``: the
        device memory each is expected to need (0: unknown)."""
        first = requests[0]
        key = trial_key(self._topic, first.number, time.monotonic_ns())
        where: dict[str, Any] = {"key": key, "resources": {self._resource: first.width * share}, "pure": False}
        if first.prefer:
            where.update(workers=[first.prefer], allow_other_workers=True)
        packing = (share, memory, headroom)
        numbers = [r.number for r in requests]
        if len(requests) == 1:
            args: tuple[Any, ...] = (run_trial, numbers, self._ship(first.trainer), first.config.to_dict())
        else:
            args = (run_trials, numbers, [(self._ship(r.trainer), r.config.to_dict()) for r in requests])
        future = self._client.submit(run_once, key, *args, self._topic, self._resource, first.width, *packing, **where)
        with self._lock:
            for number in numbers:
                self._futures[number] = future
        future.add_done_callback(lambda _f, ns=tuple(numbers): self._events.put(TaskDone(ns)))

    def has(self, number: int) -> bool:
        with self._lock:
            return number in self._futures

    def future_of(self, number: int) -> Future | None:
        with self._lock:
            return self._futures.get(number)

    def running(self) -> tuple[int, ...]:
        with self._lock:
            return tuple(self._futures)

    def ended(self, number: int) -> bool:
        """Trial ``number``'s outcome came with the event stream: whether it was running here (its task's end then
        adds nothing)."""
        with self._lock:
            return self._futures.pop(number, None) is not None

    def told(self, number: int, outcome: Outcome) -> bool:
        """Whether ``outcome`` (a worker's message) is of a run whose task's result told it already: a late message,
        to drop. The trial may run again by now (its next segment, a retry), and that run is not ended by it."""
        with self._lock:
            return outcome.started is not None and self._told.get(number) == _run_of(outcome)

    def done(self, numbers: Sequence[int]) -> list[tuple[int, Outcome]]:
        """A task ended: its trials whose outcome did not come as an event take it from the task's result (or its
        error: a lost worker, a cancel)."""
        with self._lock:
            futures = {number: self._futures.pop(number) for number in numbers if number in self._futures}
        if not futures:
            return []  # every outcome came with the event stream: no round trip for the result
        outcomes = _outcomes(next(iter(futures.values())), len(numbers))
        ended = [(number, outcome) for number, outcome in zip(numbers, outcomes) if number in futures]
        with self._lock:
            self._told.update((number, _run_of(o)) for number, o in ended if o.started is not None)
        return ended

    def close(self) -> list[Future]:
        """Forget every task; their futures, to cancel."""
        with self._lock:
            futures = list(self._futures.values())
            self._futures.clear()
        return futures


def _run_of(outcome: Outcome) -> tuple[float, float | None]:
    """A run, as its outcome tells it apart: when it started and ended on its worker."""
    return (outcome.started or 0.0, outcome.finished)


def _outcomes(future: Future | None, n: int) -> list[Outcome]:
    """One outcome per trial of the task (a batch returns a list of them)."""
    outcome = _outcome(future)
    return list(outcome) if isinstance(outcome, list) else [outcome] * n


def _outcome(future: Future | None) -> Outcome | list[Outcome]:
    """The task's result: the worker's :class:`Outcome` (a list for a batch), else why there is none."""
    from distributed import CancelledError
    from distributed.client import FutureCancelledError

    if future is None:
        return Outcome(TrialStatus.CANCELLED, error="cancelled")
    try:
        return future.result(timeout=30)
    except (CancelledError, FutureCancelledError) as exc:
        return Outcome(TrialStatus.CANCELLED, error=f"cancelled: {exc}")
    except Exception as exc:  # noqa: BLE001 - KilledWorker, comm errors: the trial's worker is gone
        return Outcome(TrialStatus.LOST, error=f"{type(exc).__name__}: {exc}".splitlines()[0])
