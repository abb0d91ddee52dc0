"""The three roads a trial takes to the cluster, and which one it takes.

A one-slot trial goes to a slot runner (:mod:`cluster.runner_pool`) while there are runners; a trial wider than
the widest worker runs as parts on several (:mod:`cluster.span_executor`); any other trial is a Dask task of its own
(:mod:`cluster.task_runner`). The first trial wider than one slot retires the runners for good, so that the slots
they hold are free for it; trials still waiting for a runner then go as tasks.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .channel import request_stop
from .connect import ClusterError, worker_nanny, worker_slots
from .executor_api import TrialRequest
from .executor_queue import EventQueue, WorkerGone
from .first_run import trial_key
from .restart import kill_worker_tree
from .runner_mail import Placement
from .runner_pool import RunnerPool
from .shipping import Shipments
from .span_executor import SpanRunner
from .task_runner import TaskRunner, run_once
from .trial_cost import TrialPredictions
from .way_out import on_loop

if TYPE_CHECKING:
    from distributed import Client, Future

    from .cluster_view import ClusterView

__all__ = ["TrialRoads", "CLUSTER_TOPIC"]

log = logging.getLogger(__name__)

CLUSTER_TOPIC = "all"  # where the scheduler logs a worker's removal


class TrialRoads:
    """The roads of one executor. ``expect(requests)``: the device memory the trials are expected to need (bytes, 0
    when unknown), asked as they are placed; ``headroom``: of a device's memory, the part trials may fill;
    ``runners=False`` runs every trial as a task of its own; ``costs()``: the trial model the executor reads (the
    slot runners' walltime check)."""

    def __init__(
        self,
        client: Client,
        topic: str,
        view: ClusterView,
        events: EventQueue,
        expect: Callable[[Sequence[TrialRequest]], int],
        headroom: float,
        runners: bool,
        costs: Callable[[], TrialPredictions],
    ) -> None:
        self._client, self._topic, self._view = client, topic, view
        self._events, self._expect, self._headroom = events, expect, headroom
        ship = Shipments()
        self.tasks = TaskRunner(client, topic, view.resource, events, ship)
        self.spans = SpanRunner(client, topic, view.resource, events, ship, run_once)
        _register_first_run(client)
        self.pool: RunnerPool | None = None
        if runners and _register_inboxes(client):
            self.pool = RunnerPool(
                client, topic, view.resource, events, ship, self._total, view.share, headroom, costs=costs
            )
            client.subscribe_topic(CLUSTER_TOPIC, self._on_cluster_event)

    def _total(self) -> int:
        """The cluster's slots now (the pool starts a runner per slot at most)."""
        return self._view.slots().total

    def _on_cluster_event(self, event: tuple[float, Any]) -> None:
        _, msg = event
        if isinstance(msg, dict) and msg.get("action") == "remove-worker" and msg.get("worker"):
            self._events.put(WorkerGone(str(msg["worker"])))

    def submit(self, requests: Sequence[TrialRequest]) -> None:
        """Run ``requests`` (all of one width) on the road their width takes: see the module's docstring."""
        from distributed.client import ClosedClientError

        width = requests[0].width
        if self.pool is not None and not self.pool.retired:
            if width == 1:
                self._place(requests)
                return
            self.retire_runners()  # a wider trial needs slots that runners would hold, on one worker or several
        widest = self._view.slots().widest  # 0 while no worker is there (joining, or restarted by its nanny): queued
        if 0 < widest < width:  # wider than any worker: parts on several (cluster.span)
            for request in requests:
                self.spans.submit(request)
            return
        try:
            self.tasks.submit(requests, self._view.share, self._expect(requests), self._headroom)
        except ClosedClientError as exc:
            raise ClusterError(f"lost the Dask scheduler at {self._view.address} ({exc})") from exc

    def _place(self, requests: Sequence[TrialRequest]) -> None:
        """One-slot trials to slot runners, under the first-run key their task would have had: a batch (trials shorter
        than a message's round trip) shares one and goes to one runner, as it would have been one task."""
        assert self.pool is not None
        key = trial_key(self._topic, requests[0].number, time.monotonic_ns())
        self.pool.place([Placement(r, key, self._expect([r])) for r in requests])

    def retire_runners(self) -> None:
        """From now on every trial is a task of its own: the runners end once their inboxes are empty, and trials
        still waiting for one go as tasks."""
        assert self.pool is not None
        self.pool.retire(now=False)
        self.flush_waiting()

    def flush_waiting(self) -> None:
        """A retired pool's waiting trials, sent as tasks."""
        if self.pool is not None and self.pool.retired:
            for placement in self.pool.take_waiting():
                self.submit([placement.request])

    def check_workers(self) -> None:
        """Parts and runners whose workers left the cluster end; runners that trials wait for are started."""
        self.spans.check_workers()
        if self.pool is not None:
            self.pool.check_workers(lambda: worker_slots(self._client))
            self.pool.tick()

    def has(self, number: int) -> bool:
        return self.tasks.has(number) or self.spans.has(number) or (self.pool is not None and self.pool.has(number))

    def running(self) -> tuple[int, ...]:
        runners = self.pool.running() if self.pool is not None else ()
        return tuple(sorted({*self.tasks.running(), *self.spans.running(), *runners}))

    def stop(self, number: int) -> None:
        """Ask trial ``number`` to stop at its next report (a wide trial not placed yet ends now)."""
        if self.spans.stop_waiting(number):
            return
        if self.has(number):
            request_stop(self._client, self._topic, number)  # rank 0 broadcasts it to every rank

    def kill(self, number: int, worker: str) -> bool:
        """See :meth:`cluster.executor_api.TrialExecutor.kill`."""
        if self.spans.has(number):
            return self.spans.kill(number)
        future = self.tasks.future_of(number)
        if future is None and self.pool is not None:
            future = self.pool.future_of(number)  # its runner: ended with its worker, like a task of its own
        nanny = worker_nanny(self._client, worker) if future is not None else ""
        if not nanny:
            log.warning(
                "cannot kill trial %d: %s",
                number,
                "its worker runs without a nanny" if future is not None else "it is not running",
            )
            return False
        self._client.cancel([future], force=True)  # first, so that Dask does not run it again on another worker
        self._client.run(kill_worker_tree, workers=[worker], nanny=True, wait=False)
        return True

    def close(self) -> list[Future]:
        """Every runner told to end after its running trial (so that its slot is free for what comes next on this
        cluster); every future still running, to cancel."""
        runners: list[Future] = []
        if self.pool is not None:
            try:
                runners = self.pool.retire(now=True)
            except Exception as exc:  # noqa: BLE001 - closing must not raise over a lost scheduler
                log.debug("retiring the slot runners failed: %s", exc)
            unsubscribe = functools.partial(self._client.unsubscribe_topic, CLUSTER_TOPIC)
            on_loop(self._client.loop, unsubscribe, 5.0, "the Dask client did not unsubscribe from its runners")
        futures = [*self.tasks.close(), *self.spans.close(), *runners]
        return list({id(f): f for f in futures}.values())


def _register_inboxes(client: Client) -> bool:
    """The worker plugin through which trials reach slot runners; False where the cluster refuses it (every trial
    is then a task of its own)."""
    from .plugins import SlotInboxes

    try:
        client.register_plugin(SlotInboxes(), name=SlotInboxes.name)
    except Exception as exc:  # noqa: BLE001 - an optimisation, never a reason not to run
        log.info("every trial runs as a Dask task of its own (no slot runners: %s)", exc)
        return False
    return True


def _register_first_run(client: Client) -> None:
    """The worker plugin that asks a queued trial's first-run question early (once per cluster; a cluster that
    refuses it only answers each question as its task starts: :mod:`cluster.first_run`)."""
    from .plugins import AskFirstRun

    try:
        client.register_plugin(AskFirstRun(), name=AskFirstRun.name)
    except Exception as exc:  # noqa: BLE001 - an optimisation, never a reason not to run
        log.info("workers ask each trial's first-run question as it starts (no plugin: %s)", exc)
