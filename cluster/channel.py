"""The trial <-> controller channel: reports and the outcome go up as Dask events, stop requests come down
(and a define-by-run trial's questions go up, their answers down: :mod:`cluster.queries`).

A report is a fire-and-forget ``Worker.log_event`` (about a millisecond, never
waits for the controller); a stop request is a named ``distributed.Event`` the
trial checks when it reports. The controller side subscribes to the topic and
queues what arrives, so the client's event loop only ever appends to a queue.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from trainers.api import report_values

from .worker_messages import MemoryPeak, TrialEnded, TrialReported, TrialStarted, send

if TYPE_CHECKING:  # distributed loads when a trial reports or a stop is sent, not on import
    from distributed import Client, Event

    from .outcome import Outcome

__all__ = ["WorkerReporter", "stop_event_name", "request_stop", "subscribe_reports"]


def stop_event_name(topic: str, number: int) -> str:
    return f"{topic}-stop-{number}"


class WorkerReporter:
    """Reporter used inside a Dask task; satisfies ``trainers.api.Reporter``.

    Every report is also kept locally (``history``) and returned with the
    outcome, so no report is lost if the event stream lags behind the result.
    """

    def __init__(self, topic: str, number: int) -> None:
        self._topic = topic
        self._number = number
        from distributed import get_worker

        self._worker = get_worker()
        self._event: Event | None = None
        self.history: list[tuple[int, dict[str, float], float]] = []
        self._stop_seen = False
        self.figures: Callable[[], int] | None = None  # the trial's peak device memory so far (bytes)

    def started(self) -> None:
        """Tell the controller the trial began on this worker (queued trials wait for a slot first)."""
        send(self._worker, self._topic, TrialStarted(self._number, time.time()))

    def report(self, step: int, metrics: Mapping[str, float]) -> None:
        plain = report_values(step, metrics)  # a value that is not a number: a TypeError naming it
        now = time.time()
        self.history.append((int(step), plain, now))
        memory = int(self.figures()) if self.figures is not None else None  # the peak so far, at each report
        send(self._worker, self._topic, TrialReported(self._number, int(step), plain, now, memory))

    def finished(self, outcome: Outcome) -> None:
        """Send the trial's outcome up the same stream as its reports, after them: the controller has it without
        asking the worker for the task's result (which it still does where this message is late or lost)."""
        send(self._worker, self._topic, TrialEnded(self._number, outcome))

    def memory(self, peak: int) -> None:
        """Send the trial's memory peak now (it grew): a worker killed for memory leaves its last figure."""
        send(self._worker, self._topic, MemoryPeak(self._number, int(peak), time.time()))

    def query(self, question: Mapping[str, Any]) -> dict[str, Any]:
        """Ask the controller ``question`` and wait for its answer (a define-by-run trial's suggestion:
        :mod:`cluster.queries`)."""
        from .queries import ask

        return ask(self._worker, self._topic, self._number, question)

    @property
    def stopped(self) -> bool:
        """Whether this trial has seen a stop request."""
        return self._stop_seen

    def should_stop(self) -> bool:
        if self._stop_seen:
            return True
        if self._event is None:
            from distributed import Event

            self._event = Event(stop_event_name(self._topic, self._number))
        self._stop_seen = bool(self._event.is_set())
        return self._stop_seen


def request_stop(client: Client, topic: str, number: int) -> None:
    """Ask trial ``number`` to stop at its next report (returns at once)."""
    from distributed import Event

    Event(stop_event_name(topic, number), client=client).set()


def subscribe_reports(client: Client, topic: str, handler: Callable[[dict[str, Any], str], None]) -> None:
    """Call ``handler(message, worker_address)`` for every report on ``topic`` (on the client's loop)."""

    def on_event(event: tuple[float, dict[str, Any]]) -> None:
        _, msg = event
        handler(msg, str(msg.get("worker", "")))

    client.subscribe_topic(topic, on_event)
