"""Run trials on a Dask cluster and turn what happens into a stream of events.

The controller talks to an executor through five calls — ``submit``, ``stop``,
``kill``, ``events`` and ``slots`` — so the same controller runs on a real cluster
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
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

# torch-free: the trial's config crosses this seam typed, and the trainer is found where the controller found it
from trainers.api import TrialConfig, entry_of, load_trainer, registered_trainer, trainer_folders

from .channel import request_stop, subscribe_reports
from .connect import ClusterError, worker_memory_limits, worker_nanny, worker_slots
from .entrypoint import TrainerShipment, run_trial, run_trials
from .first_run import FirstRun, RanBefore, trial_key
from .jobs import DEMAND_KEY, job_expired
from .memory_kills import MemoryKill, MemoryKills
from .outcome import Outcome, TrialStatus
from .packing import GpuPacking, MemoryModel
from .queries import send_answer
from .restart import kill_worker_tree
from .runner_pool import RUNNER_DONE, RUNNER_PUT, Placement, RunnerPool
from .span_executor import PART_DONE, SpanRunner

if TYPE_CHECKING:  # distributed loads with the first DaskExecutor: the loop's modules import this one for its events
    from distributed import Client, Future

__all__ = [
    "TrialRequest",
    "Started",
    "Report",
    "Finished",
    "Query",
    "Outcome",
    "TrialExecutor",
    "BatchingExecutor",
    "DaskExecutor",
    "Slots",
    "ship_trainer",
    "TrialStatus",
    "GpuPacking",
    "host_out_of_memory",
]

log = logging.getLogger(__name__)

SLOTS_TTL = 1.0  # seconds between fresh looks at the cluster's workers
SHARE_EPS = 1e-9
CLOCK_SLACK = 2.0  # seconds a worker's clock may run ahead of the scheduler's (a kill is matched to a trial's start)
CULPRIT_MARGIN = 1.5  # of trials on a worker killed for memory, the one whose memory is 1.5 x the next one's filled it
HOST_OOM_NEAR = 0.6  # a worker killed with at least this fraction of its memory limit in use ran out of memory
MEMORY_WORDS = ("memory budget", "out of memory", "oom-kill", "oom kill", "memoryerror")  # a lost worker's error: why


def host_out_of_memory(error: str, memory: int, limit: int) -> bool:
    """Whether a lost worker ran out of host memory, judged without its nanny's kill event
    (:mod:`cluster.memory_kills`, the sure sign): its error says so, or the trial's last memory figure was within
    :data:`HOST_OOM_NEAR` of the worker's limit (the kernel's OOM killer, which ends a worker with SIGKILL before
    its nanny sees it at 95%, leaves only that figure behind)."""
    if any(word in error.lower() for word in MEMORY_WORDS):
        return True
    return limit > 0 and memory >= HOST_OOM_NEAR * limit


@dataclasses.dataclass(frozen=True)
class TrialRequest:
    """One trial to run: the trainer, its config, its width in slots.

    ``trainer``: an entry ``"module:function"``, or the function itself. A function, or an
    entry registered in this process (``trainers.api.register_trainer``) or naming ``__main__``,
    goes to the workers by value (pickled as Dask pickles callables: cloudpickle, so a function
    defined in a script or a notebook works); any other entry goes by name, with the folders
    it was looked for in here (``trainers.api.trainer_folders``: the spec's folder, the current
    directory), which the worker puts on its path first. ``config`` may be given as the dict
    :meth:`TrialConfig.to_dict` writes; it is checked and kept as a :class:`TrialConfig`.
    ``prefer``: a worker address to queue it at (the one expected to free a slot first); a hint
    only, any worker may still run it.
    """

    number: int
    trainer: str | Callable[..., Any]
    config: TrialConfig
    width: int = 1
    prefer: str = ""

    def __post_init__(self) -> None:
        if self.width < 1:
            raise ValueError(f"width={self.width!r}: a trial needs at least one slot")
        if not isinstance(self.config, TrialConfig):
            object.__setattr__(self, "config", TrialConfig.from_dict(self.config))


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


OK, ERROR, LOST, CANCELLED = TrialStatus.OK, TrialStatus.ERROR, TrialStatus.LOST, TrialStatus.CANCELLED


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
        lost = [Outcome(LOST, error=error) for _ in numbers]
        return lost if run is run_trials else lost[0]


def ship_trainer(trainer: str | Callable[..., Any]) -> TrainerShipment:
    """``trainer`` (an entry or a function) as it travels to a worker: by value or by name (see :class:`TrialRequest`)."""
    if callable(trainer):
        entry = entry_of(trainer)
        return TrainerShipment.by_value(entry, trainer, trainer_folders(entry))
    fn = registered_trainer(trainer)
    if fn is None and trainer.partition(":")[0] == "__main__":
        fn = load_trainer(trainer)  # the controller's own __main__: no worker has it
    if fn is not None:
        return TrainerShipment.by_value(trainer, fn, trainer_folders(trainer))
    return TrainerShipment(trainer, trainer_folders(trainer))


@dataclasses.dataclass(frozen=True)
class Finished:
    """A trial ended, and how."""

    number: int
    outcome: Outcome


@dataclasses.dataclass(frozen=True)
class Query:
    """A running trial asks the controller (a define-by-run suggestion); ``reply(answer)`` sends the answer back."""

    number: int
    question: Mapping[str, Any]
    time: float
    reply: Callable[[Mapping[str, Any]], object]


Event = Started | Report | Finished | Query


@dataclasses.dataclass(frozen=True)
class Slots:
    """The cluster's slot capacity right now."""

    resource: str
    total: int
    widest: int
    workers: int


class TrialExecutor(Protocol):
    """What the controller needs from whatever runs trials.

    Abilities, declared as attributes: ``supports_batch`` (it has ``submit_batch``: several
    trials as one task), ``virtual_time`` (its clock is simulated, so the controller must
    not sample on another thread: virtual time would not wait for it).
    """

    supports_batch: bool
    virtual_time: bool

    def slots(self) -> Slots: ...

    def submit(self, request: TrialRequest) -> None: ...

    def stop(self, number: int) -> None: ...

    def kill(self, number: int, worker: str) -> bool:
        """End trial ``number``, running on ``worker``, which did not answer ``stop``: its task is
        cancelled (no re-run elsewhere) and the worker's processes are killed and restarted, so every
        other trial running there ends too (its ``Finished`` says lost or cancelled). False when this
        executor cannot (the worker has no nanny to restart it, or the trial is not running)."""
        ...

    def events(self, timeout: float) -> list[Event]: ...

    def wake(self) -> None:
        """Make a waiting ``events`` call return now (callable from any thread)."""
        ...

    def want(self, slots: int) -> None:
        """The campaign could use ``slots`` slots now (those its running trials hold and those its waiting trials
        need): a cluster that grows and shrinks (a job backend's ``minimum_jobs < maximum_jobs``) follows it."""
        ...

    def close(self) -> None: ...


class BatchingExecutor(TrialExecutor, Protocol):
    """An executor that can run several trials, one after another, as one task on ``width`` slots."""

    def submit_batch(self, requests: Sequence[TrialRequest]) -> None: ...


CLUSTER_TOPIC = "all"  # where the scheduler logs a worker's removal
WORKER_GONE = "worker-gone"  # the executor's queue: a worker left the cluster


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


class DaskExecutor:
    """Trials on a Dask cluster: one-slot trials through slot runners (long-lived tasks that each hold a slot and
    run the trials sent to them, :mod:`cluster.runner_pool`), wider ones as Dask tasks with resource restrictions;
    reports via the worker event stream. ``runners=False`` runs every trial as a task of its own;
    ``follows_demand`` (a cluster that scales with the campaign, ``Backend.follows_demand``): :meth:`want` leaves the
    demand on the scheduler."""

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
        self._client = client
        self._packing = packing or GpuPacking()
        self._memory_model = MemoryModel()
        self._params: dict[int, Mapping[str, Any]] = {}  # running trials' parameters, for the memory model
        self._memory_seen: dict[int, int] = {}  # running trials' last memory figure (bytes)
        self._memory_limits: dict[str, int] = {}
        self._started_on: dict[int, tuple[str, float]] = {}  # running trials' worker and start (worker's clock)
        self._memory_kills = MemoryKills(client)
        self._blamed: dict[MemoryKill, int | None] = {}  # each memory kill: the trial that filled the worker
        self._lost_after = lost_after
        self._disconnected_since: float | None = None
        self._address = str(getattr(client.scheduler, "address", "") or "the scheduler")
        self._slots: Slots | None = None
        self._wanted: dict[str, Any] = {}  # the demand last left on the scheduler (want)
        self._follows_demand = follows_demand
        self._slots_at = 0.0
        self._topic = topic
        self._resource = resource or self._infer_resource()
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._futures: dict[int, Future] = {}
        self._lock = threading.Lock()
        self._shipments: dict[Any, TrainerShipment] = {}
        self._spans = SpanRunner(client, topic, self._resource, self._queue, self._shipment, run_once)
        subscribe_reports(client, topic, self._on_report)
        _register_first_run(client)
        self._pool: RunnerPool | None = None
        if runners and _register_inboxes(client):
            self._pool = RunnerPool(
                client,
                topic,
                self._resource,
                self._queue,
                self._shipment,
                lambda: self.slots().total,
                self._share(),
                self._packing.headroom,
            )
            client.subscribe_topic(CLUSTER_TOPIC, self._on_cluster_event)

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
            share = self._share()
            owned = [res.get(self._resource, 0) for res in worker_slots(self._client).values()]
            per_worker = [int(amount / share + SHARE_EPS) for amount in owned]
            self._memory_limits = worker_memory_limits(self._client)
            self._slots = Slots(self._resource, sum(per_worker), max(per_worker, default=0), len(per_worker))
            self._slots_at = now
        return self._slots

    def _share(self) -> float:
        """Of the resource, what one slot is: ``gpus`` per trial slot on GPUs, one CPU slot otherwise."""
        return self._packing.gpus if self._resource == "GPU" else 1.0

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
        from distributed.client import ClosedClientError

        if self._pool is not None and not self._pool.retired:
            if width == 1:
                self._place(requests)
                return
            self._retire_runners()  # a wider trial needs slots that runners would hold, on one worker or several
        widest = self.slots().widest  # 0 while no worker is there (joining, or restarted by its nanny): Dask queues it
        if 0 < widest < width:  # wider than any worker: parts on several (cluster.span)
            for request in requests:
                self._spans.submit(request)
            return
        try:
            future = self._submit(requests)
        except ClosedClientError as exc:
            raise ClusterError(f"lost the Dask scheduler at {self._address} ({exc})") from exc
        numbers = tuple(r.number for r in requests)
        with self._lock:
            for request in requests:
                self._futures[request.number] = future
                self._params[request.number] = dict(request.config.params)
        future.add_done_callback(lambda _f, ns=numbers: self._queue.put(("done", ns)))

    def _place(self, requests: Sequence[TrialRequest]) -> None:
        """One-slot trials to slot runners, under the first-run key their task would have had: a batch (trials shorter
        than a message's round trip) shares one and goes to one runner, as it would have been one task."""
        assert self._pool is not None
        key = trial_key(self._topic, requests[0].number, time.monotonic_ns())
        placements = [Placement(r, key, self._expected_memory([r])) for r in requests]
        with self._lock:
            for request in requests:
                self._params[request.number] = dict(request.config.params)
        self._pool.place(placements)

    def _retire_runners(self) -> None:
        """From now on every trial is a task of its own: the runners end once their inboxes are empty, and trials
        still waiting for one go as tasks."""
        assert self._pool is not None
        self._pool.retire(now=False)
        self._flush_waiting()

    def _flush_waiting(self) -> None:
        if self._pool is not None and self._pool.retired:
            for placement in self._pool.take_waiting():
                self.submit_batch([placement.request])

    def _submit(self, requests: Sequence[TrialRequest]) -> Future:
        first = requests[0]
        key = trial_key(self._topic, first.number, time.monotonic_ns())
        share = self._share()
        where: dict[str, Any] = {"key": key, "resources": {self._resource: first.width * share}, "pure": False}
        if first.prefer:
            where.update(workers=[first.prefer], allow_other_workers=True)
        packing = (share, self._expected_memory(requests), self._packing.headroom)
        if len(requests) == 1:
            trainer = self._shipment(first.trainer)
            return self._client.submit(
                run_once,
                key,
                run_trial,
                [first.number],
                trainer,
                first.config.to_dict(),
                self._topic,
                self._resource,
                first.width,
                *packing,
                **where,
            )
        batch = [(self._shipment(r.trainer), r.config.to_dict()) for r in requests]
        numbers = [r.number for r in requests]
        return self._client.submit(
            run_once, key, run_trials, numbers, batch, self._topic, self._resource, first.width, *packing, **where
        )

    def _expected_memory(self, requests: Sequence[TrialRequest]) -> int:
        """The device memory the trials are expected to need (``gpu_memory = "auto"``), 0 when unknown or off."""
        if not self._packing.auto_memory or self._resource != "GPU":
            return 0
        return max(self._memory_model.estimate(r.config.params) for r in requests)

    def _shipment(self, trainer: str | Callable[..., Any]) -> TrainerShipment:
        """How ``trainer`` travels (see :class:`TrialRequest`); made once per trainer, pickled once."""
        shipment = self._shipments.get(trainer)
        if shipment is None:
            shipment = self._shipments[trainer] = ship_trainer(trainer)
        return shipment

    def wake(self) -> None:
        self._queue.put(("wake", None))

    def want(self, slots: int) -> None:
        """Leave the campaign's demand on the scheduler (:data:`~cluster.jobs.DEMAND_KEY`: the slots, and the
        workers whose slot runners hold a trial), when it changed: a job keeper scales its jobs by it."""
        if not self._follows_demand:  # a cluster of fixed size: no scheduler round trip per launched trial
            return
        demand = {"slots": slots, "busy": self._pool.busy_workers() if self._pool is not None else []}
        if demand == self._wanted:
            return
        try:
            self._client.sync(
                self._client.scheduler.set_metadata, keys=list(DEMAND_KEY), value=demand, callback_timeout=5
            )
        except Exception:  # noqa: BLE001 - no answer now: told again on the next call
            log.debug("could not leave the demand %s on the scheduler", demand, exc_info=True)
            return
        self._wanted = demand

    def stop(self, number: int) -> None:
        if self._spans.stop_waiting(number):
            return
        if number in self._futures or self._spans.has(number) or (self._pool is not None and self._pool.has(number)):
            request_stop(self._client, self._topic, number)  # rank 0 broadcasts it to every rank

    def kill(self, number: int, worker: str) -> bool:
        if self._spans.has(number):
            return self._spans.kill(number)
        with self._lock:
            future = self._futures.get(number)
        if future is None and self._pool is not None:
            future = self._pool.future_of(number)  # its runner: ended with its worker, like a task of its own
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

    def running(self) -> tuple[int, ...]:
        with self._lock:
            runners = self._pool.running() if self._pool is not None else ()
            return tuple(sorted({*self._futures, *self._spans.running(), *runners}))

    def events(self, timeout: float) -> list[Event]:
        """Whatever happened since the last call; waits up to ``timeout`` s for the first event.

        Raises :class:`ClusterError` once the scheduler has been unreachable for ``lost_after`` s.
        """
        self._check_scheduler()
        self._spans.check_workers()
        if self._pool is not None:
            self._pool.check_workers(lambda: worker_slots(self._client))
            self._pool.tick()
        items: list[tuple[str, Any]] = []
        try:
            items.append(self._queue.get(timeout=max(0.0, timeout)))
            while True:
                items.append(self._queue.get_nowait())
        except queue.Empty:
            pass
        return [event for kind, payload in items for event in self._to_events(kind, payload)]

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
        runners = self._close_runners()
        with self._lock:
            futures = list({id(f): f for f in [*self._futures.values(), *self._spans.close(), *runners]}.values())
            self._futures.clear()
        if futures:
            try:
                self._client.cancel(futures, force=True)
            except Exception as exc:  # noqa: BLE001 - closing must not raise over a lost scheduler
                log.debug("cancel on close failed: %s", exc)
        self._memory_kills.close()
        try:
            self._client.unsubscribe_topic(self._topic)
            if self._pool is not None:
                self._client.unsubscribe_topic(CLUSTER_TOPIC)
        except Exception as exc:  # noqa: BLE001
            log.debug("unsubscribe failed: %s", exc)

    def _close_runners(self) -> list[Future]:
        """Every runner told to end after its running trial (so that its slot is free for what comes next on this
        cluster); their futures, to cancel."""
        if self._pool is None:
            return []
        try:
            return self._pool.retire(now=True)
        except Exception as exc:  # noqa: BLE001 - closing must not raise over a lost scheduler
            log.debug("retiring the slot runners failed: %s", exc)
            return []

    def _on_report(self, msg: dict[str, Any], worker: str) -> None:
        self._queue.put(("report", (msg, worker)))

    def _on_cluster_event(self, event: tuple[float, Any]) -> None:
        _, msg = event
        if isinstance(msg, dict) and msg.get("action") == "remove-worker" and msg.get("worker"):
            self._queue.put((WORKER_GONE, str(msg["worker"])))

    def _to_events(self, kind: str, payload: Any) -> list[Event]:
        if kind == "wake":
            return []
        if kind in (RUNNER_DONE, RUNNER_PUT, WORKER_GONE):
            return self._runner_event(kind, payload)
        if kind in (PART_DONE, "span-cancelled"):
            return self._span_finished(kind, payload)
        if kind == "report":
            msg, worker = payload
            if "outcome" in msg:
                return self._finished_by_event(int(msg["number"]), msg["outcome"])
            if "query" in msg:
                return [self._query(msg, worker)]
            if "runner" in msg:
                if self._pool is not None:
                    self._pool.ready(str(msg["runner"]), str(msg["ready"]))
                return []
            if "part" in msg:
                return [Started(n, t, w) for n, t, w in self._spans.part_started(msg, worker)]
            if "memory" in msg:
                self._memory_seen[int(msg["number"])] = int(msg["memory"])
            if "step" not in msg and "started" not in msg:
                return []  # a memory figure only
            if "started" in msg:
                self._started_on[int(msg["number"])] = (worker, float(msg["started"]))
                if self._pool is not None:
                    self._pool.started(int(msg["number"]), float(msg["started"]))
                return [Started(int(msg["number"]), float(msg["started"]), worker)]
            return [Report(int(msg["number"]), int(msg["step"]), dict(msg["metrics"]), float(msg["time"]), worker)]
        return self._finished_task(payload)

    def _query(self, msg: Mapping[str, Any], worker: str) -> Query:
        """A trial's question, with the way back to the worker that asked (:mod:`cluster.queries`)."""
        number, seq = int(msg["number"]), int(msg["seq"])

        def reply(answer: Mapping[str, Any]) -> object:
            return send_answer(self._client, worker, self._topic, number, seq, answer)

        return Query(number, dict(msg["query"]), float(msg.get("time", 0.0)), reply)

    def _finished_by_event(self, number: int, message: Mapping[str, Any]) -> list[Event]:
        """A trial's outcome, sent by its worker after its reports: it ends here, and its task's end adds nothing."""
        with self._lock:
            ran = self._futures.pop(number, None) is not None
        if not ran and self._pool is not None and self._pool.has(number):
            self._pool.ended(number)
            ran = True
        if not ran:
            return []  # told already: its task's result came first
        return [Finished(number, self._account(number, Outcome.from_message(message)))]

    def _runner_event(self, kind: str, payload: Any) -> list[Event]:
        """A slot runner ended, refused trials, or lost its worker: what ends with it, and the rest placed again."""
        assert self._pool is not None
        ended: list[Finished] = []
        if kind == WORKER_GONE:
            self._pool.lost_worker(payload)
        elif kind == RUNNER_PUT:
            self._pool.refused(*payload)
        else:
            done = self._pool.done(payload)
            self._check_lost([outcome for _, outcome in done])
            ended = [Finished(number, self._account(number, outcome)) for number, outcome in done]
        self._flush_waiting()
        return list(ended)

    def _finished_task(self, numbers: tuple[int, ...]) -> list[Event]:
        """A task ended: its trials whose outcome did not come as an event take it from the task's result (or its
        error: a lost worker, a cancel)."""
        with self._lock:
            futures = {number: self._futures.pop(number) for number in numbers if number in self._futures}
        if not futures:
            return []  # every outcome came with the event stream: no round trip for the result
        outcomes = self._outcomes(next(iter(futures.values())), len(numbers))
        ended = [(number, outcome) for number, outcome in zip(numbers, outcomes) if number in futures]
        self._check_lost([o for _, o in ended])
        return [Finished(number, self._account(number, outcome)) for number, outcome in ended]

    def _account(self, number: int, outcome: Outcome) -> Outcome:
        """A lost trial whose worker its nanny killed for memory (or, failing that event, killed with the trial's
        memory near its limit) ran out of memory; a measured peak teaches the memory model."""
        seen = self._memory_seen.pop(number, 0)
        params = self._params.pop(number, {})
        worker, since = self._started_on.pop(number, (outcome.worker, outcome.started or 0.0))
        if outcome.status == LOST and job_expired(self._client, worker or outcome.worker):
            return dataclasses.replace(
                outcome, job_expired=True, error=f"its batch job reached its walltime ({outcome.error})"
            )
        if outcome.status == LOST:
            oom, resident = self._host_oom(number, outcome, worker or outcome.worker, since, seen)
            if oom:
                return dataclasses.replace(
                    outcome,
                    oom=True,
                    error=f"out of memory: {oom} ({outcome.error})",
                    worker=outcome.worker or worker,
                    peak_memory=max(outcome.peak_memory, seen, resident),
                    memory_kind=outcome.memory_kind or "rss",
                )
        if outcome.peak_memory and outcome.memory_kind == "cuda":
            self._memory_model.observe(params, outcome.peak_memory)
        return outcome

    def _host_oom(self, number: int, outcome: Outcome, worker: str, since: float, seen: int) -> tuple[str, int]:
        """Why the lost trial ran out of host memory ('' when it did not, as far as the controller can tell), and
        its worker's resident memory when its nanny killed it (bytes, 0 when unknown)."""
        kill = self._memory_kills.lookup(worker, since - CLOCK_SLACK) if worker else None
        if kill is not None:
            if self._culprit(kill, number, seen) != number:
                return "", 0  # it only shared the worker with the trial that filled it: a lost worker, retried
            return f"its worker {worker} was killed by its nanny at {kill.rss / 2**20:.0f} MiB resident", kill.rss
        limit = self._memory_limits.get(worker, 0) or max(self._memory_limits.values(), default=0)
        if host_out_of_memory(outcome.error, seen, limit):  # the kernel's OOM killer leaves no event: the figures
            why = f"its worker was killed with {seen / 2**20:.0f} MiB in use of a {limit / 2**20:.0f} MiB limit"
            return why, 0
        return "", 0

    def _culprit(self, kill: MemoryKill, number: int, seen: int) -> int | None:
        """The trial a memory kill is blamed on: the one trial running on that worker then, or, of several, the one
        whose last memory figure stands out (by :data:`CULPRIT_MARGIN`); None when the figures cannot tell
        (trials in the worker's own thread all measure its one process). Decided once per kill."""
        if kill not in self._blamed:
            figures = {
                n: self._memory_seen.get(n, 0)
                for n, (w, t) in self._started_on.items()
                if w == kill.worker and t <= kill.time + CLOCK_SLACK
            }
            figures[number] = seen
            ranked = sorted(figures.items(), key=lambda item: -item[1])
            alone = len(ranked) == 1 or ranked[0][1] > CULPRIT_MARGIN * ranked[1][1]
            self._blamed[kill] = ranked[0][0] if alone else None
        return self._blamed[kill]

    def _span_finished(self, kind: str, payload: Any) -> list[Event]:
        if kind == "span-cancelled":  # never placed: dropped by a stop, or no set of workers holds it now
            number, why = payload
            self._spans.forget(number)
            return [Finished(int(number), Outcome(LOST if why.startswith("lost") else CANCELLED, error=why))]
        outcome = self._spans.part_done(*payload)
        if outcome is None:
            return []
        self._check_lost([outcome])
        return [Finished(int(payload[0]), outcome)]

    def _check_lost(self, outcomes: Sequence[Outcome]) -> None:
        """Raise :class:`ClusterError` when trials ended lost or cancelled because the scheduler went away, not the
        trials: leave them to `resume`, do not record a failure."""
        if any(o.status in (LOST, CANCELLED) for o in outcomes) and self._client.status != "running":
            raise ClusterError(f"lost the Dask scheduler at {self._address} (client {self._client.status})")

    @classmethod
    def _outcomes(cls, future: Future | None, n: int) -> list[Outcome]:
        """One outcome per trial of the task (a batch returns a list of them)."""
        outcome = cls._outcome(future)
        return list(outcome) if isinstance(outcome, list) else [outcome] * n

    @staticmethod
    def _outcome(future: Future | None) -> Outcome | list[Outcome]:
        """The task's result: the worker's :class:`Outcome` (a list for a batch), else why there is none."""
        from distributed import CancelledError
        from distributed.client import FutureCancelledError

        if future is None:
            return Outcome(CANCELLED, error="cancelled")
        try:
            return future.result(timeout=30)
        except (CancelledError, FutureCancelledError) as exc:
            return Outcome(CANCELLED, error=f"cancelled: {exc}")
        except Exception as exc:  # noqa: BLE001 - KilledWorker, comm errors: the trial's worker is gone
            return Outcome(LOST, error=f"{type(exc).__name__}: {exc}".splitlines()[0])
