"""Run trials on a Dask cluster and turn what happens into a stream of events.

The controller talks to an executor through five calls — ``submit``, ``stop``,
``kill``, ``events`` and ``slots`` — so the same controller runs on a real cluster
(:class:`DaskExecutor`) or against virtual time in a simulation.
Everything the Dask client's threads see is only put on one queue; the
controller's own thread takes it from there.

The executor is a hub of parts, each in its own module: the seam's types (:mod:`cluster.executor_api`), the
cluster as it sees it (:mod:`cluster.cluster_view`), the roads a trial takes (:mod:`cluster.roads`: slot runners,
tasks, spans), the messages workers send (:mod:`cluster.worker_messages`) and the events made of them
(:mod:`cluster.executor_events`), and why a lost trial was lost (:mod:`cluster.oom_forensics`). The names the rest
of hypersweep imports from here are re-exported.
"""

from __future__ import annotations

import functools
import logging
import queue
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import way_out
from .channel import subscribe_reports
from .cluster_view import ClusterView
from .executor_api import (
    BatchingExecutor,
    Event,
    Finished,
    Query,
    Report,
    Slots,
    Started,
    TrialExecutor,
    TrialRequest,
)
from .executor_events import EventTranslator
from .executor_queue import EventQueue, FromWorker, QueueItem, Wake
from .memory_feed import MemoryFeed
from .oom_forensics import Forensics, host_out_of_memory
from .outcome import Outcome, TrialStatus
from .packing import GpuPacking
from .roads import TrialRoads
from .shipping import ship_trainer
from .task_runner import run_once
from .trial_cost import ModelPredictions, TrialPredictions
from .way_out import on_loop

if TYPE_CHECKING:  # distributed loads with the first DaskExecutor: the loop's modules import this one for its events
    from distributed import Client

__all__ = [
    "TrialRequest",
    "Started",
    "Report",
    "Finished",
    "Query",
    "Event",
    "Outcome",
    "TrialExecutor",
    "BatchingExecutor",
    "DaskExecutor",
    "Slots",
    "ship_trainer",
    "run_once",
    "TrialStatus",
    "GpuPacking",
    "host_out_of_memory",
    "OK",
    "ERROR",
    "LOST",
    "CANCELLED",
]

log = logging.getLogger(__name__)

CLOSE_SECONDS = 5.0  # each of the close's calls through the client's event loop, at most

OK, ERROR, LOST, CANCELLED = TrialStatus.OK, TrialStatus.ERROR, TrialStatus.LOST, TrialStatus.CANCELLED


class DaskExecutor:
    """Trials on a Dask cluster: one-slot trials through slot runners (long-lived tasks that each hold a slot and
    run the trials sent to them, :mod:`cluster.runner_pool`), wider ones as Dask tasks with resource restrictions;
    reports via the worker event stream. ``runners=False`` runs every trial as a task of its own;
    ``follows_demand`` (a cluster that scales with the campaign, ``Backend.follows_demand``): :meth:`want` leaves the
    demand on the scheduler. It reads the campaign's trial model (:meth:`predict_with`): a batch job's walltime
    against a trial's predicted duration (:class:`cluster.walltimes.Walltimes`), the packing's device memory
    (:class:`cluster.memory_feed.MemoryFeed`); until a campaign hands it over, a model that knows nothing."""

    supports_batch = True
    virtual_time = False

    def __init__(
        self,
        client: Client,
        topic: str,
        resource: str | None = None,
        lost_after: float = 30.0,
        packing: GpuPacking | None = None,
        runners: bool = True,
        follows_demand: bool = False,
    ) -> None:
        way_out.end()  # a campaign (or its next round) starts here: no way out under way, unless the process leaves
        packing = packing or GpuPacking()
        self._client, self._topic = client, topic
        self._queue: EventQueue = queue.Queue()
        self._view = ClusterView(client, resource, packing.gpus, lost_after, follows_demand)
        subscribe_reports(client, topic, self._on_message)
        self._forensics = Forensics(client, lambda: self._view.memory_limits)
        self._costs: TrialPredictions = ModelPredictions()
        self._feed = MemoryFeed(packing, self._view.resource, self.costs)
        self._roads = TrialRoads(
            client, topic, self._view, self._queue, self._feed.expect, packing.headroom, runners, self.costs
        )
        self._translate = EventTranslator(client, topic, self._roads, self._view, self._forensics)

    @property
    def resource(self) -> str:
        return self._view.resource

    def predict_with(self, costs: TrialPredictions) -> None:
        """Read ``costs``, the campaign's trial model, from now on (see :class:`cluster.executor_api.TrialExecutor`)."""
        self._costs = costs

    def costs(self) -> TrialPredictions:
        """The trial model this executor reads: its campaign's, once handed over."""
        return self._costs

    def slots(self) -> Slots:
        """The cluster's slots (see :meth:`cluster.cluster_view.ClusterView.slots`)."""
        return self._view.slots()

    def wait_for_workers(self, n: int, timeout: float) -> None:
        self._client.wait_for_workers(n, timeout=timeout)

    def submit(self, request: TrialRequest) -> None:
        self.submit_batch([request])

    def submit_batch(self, requests: Sequence[TrialRequest]) -> None:
        """Run ``requests`` one after another in one Dask task on ``width`` slots (all the same width).

        Each trial still reports, can be stopped and ends in its own ``Finished``;
        a batch only saves the task round trips of trials shorter than one.
        """
        if not requests:
            return
        width = requests[0].width
        if any(r.width != width for r in requests):
            raise ValueError(f"a batch holds trials of one width; got widths {sorted({r.width for r in requests})}")
        self._roads.submit(requests)

    def wake(self) -> None:
        self._queue.put(Wake())

    def want(self, slots: int) -> None:
        """Leave the campaign's demand on the scheduler, when it changed and the cluster follows it (see
        :meth:`cluster.cluster_view.ClusterView.want`)."""
        pool = self._roads.pool
        self._view.want(slots, pool.busy_workers if pool is not None else list)

    def stop(self, number: int) -> None:
        self._roads.stop(number)

    def kill(self, number: int, worker: str) -> bool:
        return self._roads.kill(number, worker)

    def running(self) -> tuple[int, ...]:
        return self._roads.running()

    def events(self, timeout: float) -> list[Event]:
        """Whatever happened since the last call; waits up to ``timeout`` s for the first event.

        Raises :class:`ClusterError` once the scheduler has been unreachable for ``lost_after`` s.
        """
        self._view.check()
        self._roads.check_workers()
        items: list[QueueItem] = []
        try:
            items.append(self._queue.get(timeout=max(0.0, timeout)))
            while True:
                items.append(self._queue.get_nowait())
        except queue.Empty:
            pass
        return [event for item in items for event in self._translate(item)]

    def close(self) -> None:
        """Cancel what is still running and stop listening; each wait bounded (:mod:`cluster.way_out`), never
        raises (a lost scheduler is logged)."""
        futures = self._roads.close()
        client = self._client
        if futures:
            cancel = functools.partial(client.cancel, futures, asynchronous=True, force=True)  # its coroutine
            on_loop(client.loop, cancel, CLOSE_SECONDS, "the Dask client did not send the cancel of its tasks")
        self._forensics.close()
        unsubscribe = functools.partial(client.unsubscribe_topic, self._topic)
        on_loop(client.loop, unsubscribe, CLOSE_SECONDS, "the Dask client did not unsubscribe from its reports")

    def _on_message(self, message: dict[str, Any], worker: str) -> None:
        self._queue.put(FromWorker(message, worker))
