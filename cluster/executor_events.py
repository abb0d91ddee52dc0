"""What lands on a :class:`~cluster.executor.DaskExecutor`'s queue, turned into the controller's events.

A worker's message (:mod:`cluster.worker_messages`) is decoded by its kind; a trial that ends, by its outcome
message or by its task's (or runner's) end, ends once, with why it was lost where that can be told
(:mod:`cluster.oom_forensics`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .executor_api import Event, Finished, Query, Report, Started
from .executor_queue import (
    FromWorker,
    PartDone,
    QueueItem,
    RunnerDone,
    RunnerRefused,
    SpanCancelled,
    TaskDone,
    Wake,
    WorkerGone,
)
from .outcome import Outcome, TrialStatus
from .queries import send_answer
from .worker_messages import (
    MemoryPeak,
    PartStarted,
    RunnerReady,
    TrialAsked,
    TrialEnded,
    TrialReported,
    TrialStarted,
    WorkerMessage,
    decode,
)

if TYPE_CHECKING:
    from distributed import Client

    from .cluster_view import ClusterView
    from .oom_forensics import Forensics
    from .roads import TrialRoads

__all__ = ["EventTranslator"]


class EventTranslator:
    """The events of one executor (its client and topic, its roads, its view of the cluster and its forensics)."""

    def __init__(
        self,
        client: Client,
        topic: str,
        roads: TrialRoads,
        view: ClusterView,
        forensics: Forensics,
    ) -> None:
        self._client, self._topic, self._roads, self._view = client, topic, roads, view
        self._forensics = forensics

    def __call__(self, item: QueueItem) -> list[Event]:
        match item:
            case FromWorker(message=message, worker=worker):
                return self._from_worker(decode(message), worker)
            case TaskDone(numbers=numbers):
                ended = self._roads.tasks.done(numbers)
                self._view.check_lost([o for _, o in ended])
                return [self._finished(number, outcome) for number, outcome in ended]
            case RunnerDone() | RunnerRefused() | WorkerGone():
                return self._runner_event(item)
            case PartDone(number=number, index=index):
                outcome = self._roads.spans.part_done(number, index)
                if outcome is None:
                    return []
                self._view.check_lost([outcome])
                return [Finished(number, outcome)]
            case SpanCancelled(number=number, why=why):  # never placed: a stop, or no set of workers holds it now
                self._roads.spans.forget(number)
                status = TrialStatus.LOST if why.startswith("lost") else TrialStatus.CANCELLED
                return [Finished(number, Outcome(status, error=why))]
            case Wake():
                return []
        raise TypeError(f"not an item of the executor's queue: {item!r}")

    def _from_worker(self, message: WorkerMessage | None, worker: str) -> list[Event]:
        pool = self._roads.pool
        match message:
            case TrialReported(number=number, memory=memory):
                if memory is not None:
                    self._forensics.memory(number, memory)
                return [Report(number, message.step, dict(message.metrics), message.time, worker)]
            case TrialStarted(number=number, started=started):
                self._forensics.started(number, worker, started)
                if pool is not None:
                    pool.started(number, started)
                return [Started(number, started, worker)]
            case MemoryPeak(number=number, memory=memory):
                self._forensics.memory(number, memory)
                return []
            case TrialEnded(number=number, outcome=outcome):
                return self._ended_by_event(number, outcome)
            case TrialAsked():
                return [self._query(message, worker)]
            case RunnerReady(runner=runner, address=address):
                if pool is not None:
                    pool.ready(runner, address)
                return []
            case PartStarted(number=number, part=part, started=started):
                return [Started(n, t, w) for n, t, w in self._roads.spans.part_started(number, part, started)]
        return []  # a kind this version does not know

    def _query(self, asked: TrialAsked, worker: str) -> Query:
        """A trial's question, with the way back to the worker that asked (:mod:`cluster.queries`)."""

        def reply(answer: Mapping[str, Any]) -> object:
            return send_answer(self._client, worker, self._topic, asked.number, asked.seq, answer)

        return Query(asked.number, dict(asked.question), asked.time, reply)

    def _ended_by_event(self, number: int, outcome: Outcome) -> list[Event]:
        """A trial's outcome, sent by its worker after its reports: it ends here, and its task's end adds nothing."""
        if self._roads.tasks.told(number, outcome):
            return []  # its task's result came first, and the trial may run again by now
        pool = self._roads.pool
        ran = self._roads.tasks.ended(number)
        if not ran and pool is not None and pool.has(number):
            pool.ended(number)
            ran = True
        if not ran:
            return []  # told already: its task's result came first
        return [self._finished(number, outcome)]

    def _runner_event(self, item: RunnerDone | RunnerRefused | WorkerGone) -> list[Event]:
        """A slot runner ended, refused trials, or lost its worker: what ends with it, and the rest placed again."""
        pool = self._roads.pool
        assert pool is not None
        ended: list[Event] = []
        match item:
            case WorkerGone(worker=worker):
                pool.lost_worker(worker)
            case RunnerRefused(key=key, numbers=numbers):
                pool.refused(key, numbers)
            case RunnerDone(key=key):
                done = pool.done(key)
                self._view.check_lost([outcome for _, outcome in done])
                ended = [self._finished(number, outcome) for number, outcome in done]
        self._roads.flush_waiting()
        return ended

    def _finished(self, number: int, outcome: Outcome) -> Finished:
        """Trial ``number`` ended: lost, with why where that can be told (its campaign's trial model learns its
        measured peak memory from the event)."""
        return Finished(number, self._forensics.diagnose(number, outcome) or outcome)
