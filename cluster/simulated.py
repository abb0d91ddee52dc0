"""A simulated cluster: the :class:`TrialExecutor` protocol against virtual time.

The controller's own code (``search.loop.campaign.Campaign``) runs unchanged against
:class:`SimulatedExecutor`; only time is simulated. Each submitted trial gets a
:class:`TrialPlan` from a :class:`TrialModel` (how long each epoch takes, what it
reports), occupies a simulated slot, and produces ``Report`` events at its epoch
ends and a ``Finished`` event at its last one. ``events()`` jumps the virtual
clock to the next event at once: no sleeping, so 1,024 workers x 60 s trials
take seconds of real time.

The controller itself is not free: by default the real seconds the controller
spends between two ``events()`` calls are charged to the virtual clock
(``controller_time_scale=1.0``), as if the controller ran on a single thread
beside the simulated cluster. A slow sampler or storage then shows up as idle
slots, exactly as it would on a real cluster. Set the scale to 0 for a
controller that takes no time.

The models (:mod:`cluster.sim_models`): :class:`TableModel` (the NAS-Bench-201
12-epoch accuracy table) and :class:`CurveModel` (synthetic learning curves).
Every random draw comes from a ``numpy.random.Generator`` seeded by
``(seed, trial number, attempt)``, so a trial's plan does not depend on the
order trials are scheduled in.

Pure Python and numpy: nothing here talks to Dask.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .executor import Event, Finished, Outcome, Report, Slots, Started, TrialRequest
from .outcome import TrialStatus
from .sim_models import NB201_OPS, CurveModel, TableModel, TrialModel, TrialPlan, check_positive, nb201_cell
from .trial_cost import TrialPredictions

__all__ = [
    "TrialPlan",
    "TrialModel",
    "TableModel",
    "CurveModel",
    "SimulatedExecutor",
    "NB201_OPS",
    "nb201_cell",
]

# --- the executor ------------------------------------------------------------------------------


@dataclasses.dataclass
class _Slot:
    worker: int
    index: int
    busy: list[tuple[float, float]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Run:
    """A trial occupying slots."""

    request: TrialRequest
    plan: TrialPlan
    worker: int
    slots: list[_Slot]
    started: float
    epoch: int = 0  # epochs completed
    stop_requested: bool = False
    history: list[list[Any]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Worker:
    name: str
    slots: list[_Slot]
    alive: bool = True
    down: list[tuple[float, float]] = dataclasses.field(default_factory=list)


# Event kinds on the heap, in the order they are handled at one instant.
_STARTED, _EPOCH, _FAIL, _RECOVER = 0, 1, 2, 3


class SimulatedExecutor:
    """Runs trials on ``n_workers x slots_per_worker`` simulated slots in virtual time.

    - ``submit`` starts the trial on a free slot (first fit, after ``dispatch_latency``
      virtual seconds) or queues it until one frees up.
    - A trial's start is a ``Started`` event; each epoch end is a ``Report``; the last
      one is followed by ``Finished``. A re-submitted number (a retry) draws a new plan.
      ``stop(number)`` ends the trial at its next report, as the real channel does.
    - ``failure_rate``: the probability that the worker dies while running a given
      trial (at a uniform time within it). Every trial on that worker ends ``lost``;
      the worker comes back ``recovery_seconds`` later. Queued requests wait for it.
    - A report's step is the epoch it carries (``metrics["epoch"]``; else the run's count of
      epochs), as a trainer that resumes from its checkpoint reports it. A trial submitted
      again (its next segment, a retry) has that checkpoint at the last epoch it reported:
      its config gets ``resume_epoch`` (before any report here: the epoch the controller sent it to resume at,
      a resumed campaign's), which a model that resumes
      (:class:`TrialPlan` from there on) reads and the others ignore.
    - ``events(timeout)`` moves the clock to the next event time and returns every
      event due by then (the ``timeout`` is not waited out: virtual time has no idle
      waiting). Pass ``clock=executor.clock`` to the controller.
    - ``controller_time_scale``: virtual seconds charged per real second the
      controller spends between ``events()`` calls (0 = a free controller). The
      simulator's own work (a trial's plan at its start, the events) is not charged.
    - ``sampler_process``: model the sampler child process a real cluster runs the built-in ``tpe``
      and ``gp`` in (:mod:`search.sampling.virtual_child`): its asks and tells go on a core of
      its own (:meth:`sampler_work`), not on the controller's clock, and a trial starts once
      that core has sampled it (:meth:`params_ready`). Off: such a campaign samples on the loop.
    - ``join_seconds``: the workers join one by one over this many virtual seconds
      (worker k of n at k/n of it; worker 0 at once), as a cluster that is scaling up;
      until then a worker is down. 0 (default): all are there at once, so the first wave
      of trials starts, and ends one trial length later, all together.
    """

    supports_batch = False
    virtual_time = True  # the controller must not sample on a thread: virtual time would not wait for it

    def __init__(
        self,
        n_workers: int,
        model: TrialModel,
        slots_per_worker: int = 1,
        seed: int = 0,
        failure_rate: float = 0.0,
        recovery_seconds: float = 30.0,
        dispatch_latency: float = 0.0,
        controller_time_scale: float = 1.0,
        resource: str = "CPU",
        timer: Callable[[], float] = time.perf_counter,
        join_seconds: float = 0.0,
        sampler_process: bool = False,
    ) -> None:
        if isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1:
            raise ValueError(f"n_workers={n_workers!r}: must be an int >= 1")
        if isinstance(slots_per_worker, bool) or not isinstance(slots_per_worker, int) or slots_per_worker < 1:
            raise ValueError(f"slots_per_worker={slots_per_worker!r}: must be an int >= 1")
        if not (0.0 <= float(failure_rate) < 1.0):
            raise ValueError(f"failure_rate={failure_rate!r}: must be a probability in [0, 1)")
        self.model = model
        self.seed = int(seed)
        self.failure_rate = float(failure_rate)
        self.recovery_seconds = check_positive("recovery_seconds", recovery_seconds, allow_zero=True)
        self.dispatch_latency = check_positive("dispatch_latency", dispatch_latency, allow_zero=True)
        self.controller_time_scale = check_positive("controller_time_scale", controller_time_scale, allow_zero=True)
        self.resource = resource
        self._timer = timer
        self._workers = [
            _Worker(f"sim-worker-{w}", [_Slot(w, s) for s in range(slots_per_worker)]) for w in range(n_workers)
        ]
        self._free: list[set[int]] = [set(range(slots_per_worker)) for _ in range(n_workers)]
        self._may_have_free = list(range(n_workers))  # a heap of worker indexes, each with a free slot when pushed
        self._slots_per_worker = slots_per_worker
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = itertools.count()
        self._queue: deque[TrialRequest] = deque()
        self._runs: dict[int, _Run] = {}
        self._pending: set[int] = set()  # submitted, not yet finished (queued, dispatching or running)
        self._stops: set[int] = set()  # stop requested before the trial started
        self._attempts: dict[int, int] = {}  # a trial re-submitted after a lost worker draws afresh
        self._reported: dict[int, int] = {}  # trial number -> the last epoch it reported (its checkpoint's)
        self._now = 0.0
        self._real_mark: float | None = None  # real time the controller got the last batch
        self._closed = False
        self.controller_seconds = 0.0  # real seconds charged to the controller
        self.counts = {"submitted": 0, "ok": 0, "lost": 0, "cancelled": 0, "failures": 0, "events_calls": 0}
        self.join_seconds = check_positive("join_seconds", join_seconds, allow_zero=True)
        self.models_sampler_process = bool(sampler_process)
        self.sampler_seconds = 0.0  # real seconds of a modelled sampler child's work, on its own core
        self._sampler_free = 0.0  # the virtual time that core is done with what it was given
        self._params_ready: dict[int, float] = {}  # trial number -> the virtual time its parameters exist
        for index in range(1, n_workers if self.join_seconds else 0):
            self._workers[index].alive = False
            self._workers[index].down.append((0.0, math.inf))
            self._push(index / n_workers * self.join_seconds, _RECOVER, index)

    # --- the clock ---------------------------------------------------------------------------

    def clock(self) -> float:
        """Virtual seconds since the simulation began (controller time included)."""
        return self._now + self._controller_lag()

    def _controller_lag(self) -> float:
        if self._real_mark is None or self.controller_time_scale == 0:
            return 0.0
        return (self._timer() - self._real_mark) * self.controller_time_scale

    def _charge_controller(self) -> None:
        """Move the clock past the controller's work since it last got events."""
        if self._real_mark is not None:
            lag = self._controller_lag()
            self.controller_seconds += self._timer() - self._real_mark
            self._now += lag
            self._real_mark = None

    # --- a sampler child, modelled (search.sampling.virtual_child) ------------------------------

    def sampler_work(self, seconds: float) -> float:
        """``seconds`` of real time the loop just spent on a sampler child's work (an ask, a tell it records):
        taken off the controller's clock and queued on the child's own core. Returns the virtual time that core
        is done with it."""
        seconds = max(0.0, float(seconds))
        if self._real_mark is not None:
            self._real_mark += seconds
        self.sampler_seconds += seconds
        start = max(self._sampler_free, self.clock())
        self._sampler_free = start + seconds * self.controller_time_scale
        return self._sampler_free

    def params_ready(self, number: int, at: float) -> None:
        """Trial ``number``'s parameters exist from virtual time ``at``: it starts no earlier (its slot waits)."""
        self._params_ready[number] = float(at)

    # --- TrialExecutor -----------------------------------------------------------------------

    def slots(self) -> Slots:
        """The nominal capacity: a lost worker's slots come back, so requests just wait."""
        return Slots(
            self.resource, len(self._workers) * self._slots_per_worker, self._slots_per_worker, len(self._workers)
        )

    def wake(self) -> None:
        """Nothing to wake: ``events`` never waits in real time."""

    def want(self, slots: int) -> None:
        """Its workers are fixed: the demand changes nothing."""

    def predict_with(self, costs: TrialPredictions) -> None:
        """Nothing here predicts (no batch job ends, no device memory to pack: a trial runs its plan), so it keeps
        no trial model of its own either: the campaign's is the only one."""

    def submit(self, request: TrialRequest) -> None:
        if request.width > self._slots_per_worker:
            raise ValueError(
                f"trial {request.number} needs {request.width} slots but a worker has {self._slots_per_worker}"
            )
        if self._real_mark is None and self.counts["events_calls"] == 0:
            self._real_mark = self._timer()  # the controller's clock starts with its first submit
        self.counts["submitted"] += 1
        self._pending.add(request.number)
        self._queue.append(request)
        self._start_uncharged()

    def _start_uncharged(self) -> None:
        """Start what the free slots can take, the simulator's own work (drawing each trial's plan) not charged
        to the controller: as in :meth:`events`, only the controller's time moves the clock."""
        charging = self._real_mark is not None
        self._charge_controller()
        self._start_queued(self._now)
        if charging:
            self._real_mark = self._timer()

    def stop(self, number: int) -> None:
        run = self._runs.get(number)
        if run is not None:
            run.stop_requested = True
        elif number in self._pending:
            self._stops.add(number)

    def kill(self, number: int, worker: str) -> bool:
        """Simulated trials always answer a stop request at their next report: nothing to kill."""
        return False

    def events(self, timeout: float = 0.0) -> list[Event]:
        """Every event due at the next event time (or already due); [] when nothing is pending."""
        self.counts["events_calls"] += 1
        self._charge_controller()
        out: list[Event] = []
        while not out and self._heap:  # a recovery or a stale epoch yields nothing: go on to the next time
            if self._heap[0][0] > self._now:
                self._now = self._heap[0][0]
            while self._heap and self._heap[0][0] <= self._now:
                at, kind, _seq, payload = heapq.heappop(self._heap)
                out.extend(self._fire(at, kind, payload))
            self._start_queued(self._now)
        if self._real_mark is None:
            self._real_mark = self._timer()
        return out

    def close(self) -> None:
        """Cancel whatever is queued or running (no events are produced for them)."""
        end = self.clock()
        for run in list(self._runs.values()):
            self._release(run, end)
        self._runs.clear()
        self._queue.clear()
        self._pending.clear()
        self._heap.clear()
        self._closed = True

    # --- measurements ------------------------------------------------------------------------

    def busy_intervals(self) -> dict[str, list[tuple[float, float]]]:
        """Per worker, the (start, end) virtual intervals each of its slots was running a trial."""
        return {w.name: sorted(iv for slot in w.slots for iv in slot.busy) for w in self._workers}

    def down_intervals(self) -> dict[str, list[tuple[float, float]]]:
        """Per worker, the (died, back) intervals it was down."""
        return {w.name: list(w.down) for w in self._workers}

    def utilization(self, start: float | None = None, end: float | None = None) -> float:
        """Busy slot-seconds / (all slots x (end - start)).

        By default the window runs from the first trial start to the last trial end,
        so start-up and the tail of the last trial do not count against it.
        """
        intervals = [iv for w in self._workers for slot in w.slots for iv in slot.busy]
        if not intervals:
            return 0.0
        lo = min(s for s, _ in intervals) if start is None else start
        hi = max(e for _, e in intervals) if end is None else end
        if hi <= lo:
            return 0.0
        busy = sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in intervals)
        return busy / ((hi - lo) * len(self._workers) * self._slots_per_worker)

    def makespan(self) -> float:
        """Virtual time from the first trial start to the last trial end."""
        intervals = [iv for w in self._workers for slot in w.slots for iv in slot.busy]
        return max(e for _, e in intervals) - min(s for s, _ in intervals) if intervals else 0.0

    # --- internals ---------------------------------------------------------------------------

    def _push(self, at: float, kind: int, payload: Any) -> None:
        heapq.heappush(self._heap, (at, kind, next(self._seq), payload))

    def _start_queued(self, now: float) -> None:
        while self._queue:
            request = self._queue[0]
            worker = self._free_worker(request.width)
            if worker is None:
                return
            self._queue.popleft()
            self._start(request, worker, now)

    def _free_worker(self, width: int) -> int | None:
        """The first worker (lowest index) with ``width`` free slots that is alive, or None."""
        if width > 1:
            for index, free in enumerate(self._free):
                if len(free) >= width and self._workers[index].alive:
                    return index
            return None
        heap = self._may_have_free  # width 1: constant time per start at 10,000 workers, not a scan of them all
        while heap and not (self._free[heap[0]] and self._workers[heap[0]].alive):
            heapq.heappop(heap)  # pushed again when a slot frees or the worker comes back
        return heap[0] if heap else None

    def _start(self, request: TrialRequest, worker: int, now: float) -> None:
        free = self._free[worker]
        slots = [self._workers[worker].slots[free.pop()] for _ in range(request.width)]
        attempt = self._attempts.get(request.number, 0)
        self._attempts[request.number] = attempt + 1
        rng = np.random.default_rng([self.seed, request.number, attempt])
        plan = self.model.plan(
            {**request.config.to_dict(), "resume_epoch": self._reported.get(request.number, request.start_epoch)}, rng
        )
        started = max(now, self._params_ready.pop(request.number, now)) + self.dispatch_latency
        run = _Run(request, plan, worker, slots, started)
        if request.number in self._stops:
            self._stops.discard(request.number)
            run.stop_requested = True
        self._runs[request.number] = run
        self._push(started, _STARTED, (request.number, id(run)))
        self._push(started + plan.epoch_seconds[0], _EPOCH, (request.number, id(run)))
        if self.failure_rate and rng.random() < self.failure_rate:
            self._push(started + rng.uniform(0.0, plan.duration), _FAIL, (request.number, id(run)))

    def _fire(self, at: float, kind: int, payload: Any) -> list[Event]:
        if kind == _STARTED:
            run = self._current(*payload)
            return [] if run is None else [Started(run.request.number, at, self._workers[run.worker].name)]
        if kind == _EPOCH:
            return self._on_epoch(at, *payload)
        if kind == _FAIL:
            return self._on_failure(at, *payload)
        if kind == _RECOVER:
            worker = self._workers[payload]
            worker.alive = True
            heapq.heappush(self._may_have_free, payload)
            worker.down[-1] = (worker.down[-1][0], at)
            self._start_queued(at)
            return []
        raise AssertionError(f"unknown event kind {kind}")

    def _current(self, number: int, token: int) -> _Run | None:
        run = self._runs.get(number)
        return run if run is not None and id(run) == token else None

    def _on_epoch(self, at: float, number: int, token: int) -> list[Event]:
        run = self._current(number, token)
        if run is None:
            return []  # the worker died first
        metrics = dict(run.plan.metrics[run.epoch])
        run.epoch += 1
        name = self._workers[run.worker].name
        step = int(metrics.get("epoch", run.epoch))  # a resumed run's reports go on from its checkpoint's epoch
        self._reported[number] = step
        run.history.append([step, metrics, at])
        out: list[Event] = [Report(number, step, metrics, at, name)]
        if run.stop_requested or run.epoch == len(run.plan.epoch_seconds):
            out.append(self._finish(run, at, "ok", metrics))
            self._start_queued(at)  # the scheduler refills the slot itself: a queued request starts now
        else:
            self._push(at + run.plan.epoch_seconds[run.epoch], _EPOCH, (number, token))
        return out

    def _on_failure(self, at: float, number: int, token: int) -> list[Event]:
        if self._current(number, token) is None:
            return []
        worker_index = self._runs[number].worker
        worker = self._workers[worker_index]
        self.counts["failures"] += 1
        worker.alive = False
        worker.down.append((at, math.inf))
        self._push(at + self.recovery_seconds, _RECOVER, worker_index)
        out: list[Event] = []
        for run in [r for r in self._runs.values() if r.worker == worker_index]:
            out.append(self._finish(run, at, "lost", {}, error=f"simulated worker {worker.name} died"))
        self._start_queued(at)
        return out

    def _finish(self, run: _Run, at: float, status: str, metrics: Mapping[str, float], error: str = "") -> Finished:
        self._release(run, at)
        del self._runs[run.request.number]
        self._pending.discard(run.request.number)
        self.counts[status] += 1
        outcome = Outcome(
            status=TrialStatus(status),
            metrics=dict(metrics),
            error=error,
            worker=self._workers[run.worker].name,
            host="simulated",
            started=run.started,
            finished=at,
            history=tuple((int(e), m, float(t)) for e, m, t in run.history),
            stopped=run.stop_requested,
        )
        return Finished(run.request.number, outcome)

    def _release(self, run: _Run, at: float) -> None:
        for slot in run.slots:
            slot.busy.append((run.started, max(run.started, at)))
            self._free[slot.worker].add(slot.index)
            heapq.heappush(self._may_have_free, slot.worker)
