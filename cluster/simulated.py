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

Two models: :class:`TableModel` (the NAS-Bench-201 12-epoch accuracy table)
and :class:`CurveModel` (synthetic learning curves). Every random draw comes
from a ``numpy.random.Generator`` seeded by ``(seed, trial number, attempt)``,
so a trial's plan does not depend on the order trials are scheduled in.

Pure Python and numpy: nothing here talks to Dask.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import heapq
import itertools
import math
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .executor import Event, Finished, Outcome, Report, Slots, Started, TrialRequest
from .outcome import TrialStatus

__all__ = [
    "TrialPlan",
    "TrialModel",
    "TableModel",
    "CurveModel",
    "SimulatedExecutor",
    "NB201_OPS",
    "nb201_cell",
]

# --- trial models ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TrialPlan:
    """What one trial will do: per-epoch durations (virtual s) and per-epoch metrics."""

    epoch_seconds: tuple[float, ...]
    metrics: tuple[Mapping[str, float], ...]

    def __post_init__(self) -> None:
        if not self.epoch_seconds:
            raise ValueError("a trial plan needs at least one epoch")
        if len(self.epoch_seconds) != len(self.metrics):
            raise ValueError(f"epoch_seconds has {len(self.epoch_seconds)} entries but metrics has {len(self.metrics)}")
        for i, seconds in enumerate(self.epoch_seconds):
            if not (math.isfinite(seconds) and seconds >= 0):
                raise ValueError(f"epoch_seconds[{i}]={seconds!r}: must be a finite number >= 0")

    @property
    def duration(self) -> float:
        return float(sum(self.epoch_seconds))


class TrialModel(Protocol):
    """Turns a trial config (the dict the controller submits) into a plan."""

    def plan(self, config: Mapping[str, Any], rng: np.random.Generator) -> TrialPlan: ...


def _epoch_seconds(trial_seconds: float, epochs: int, jitter: float, rng: np.random.Generator) -> tuple[float, ...]:
    """``trial_seconds`` split over ``epochs``, each epoch scaled by a lognormal(0, jitter) draw."""
    base = trial_seconds / epochs
    if jitter <= 0:
        return tuple(base for _ in range(epochs))
    factors = rng.lognormal(mean=-0.5 * jitter**2, sigma=jitter, size=epochs)  # mean 1
    return tuple(float(base * f) for f in factors)


def _check_positive(name: str, value: float, allow_zero: bool = False) -> float:
    value = float(value)
    ok = value >= 0 if allow_zero else value > 0
    if not (math.isfinite(value) and ok):
        raise ValueError(f"{name}={value!r}: must be a finite number {'>= 0' if allow_zero else '> 0'}")
    return value


# NAS-Bench-201 ---------------------------------------------------------------------------------

NB201_OPS = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
NB201_DATASETS = {"cifar10": "cifar10", "cifar100": "cifar100", "imagenet": "imagenet", "imagenet16-120": "imagenet"}
_NB201_CHANCE = {"cifar10": 10.0, "cifar100": 1.0, "imagenet": 1.0 / 1.2}


def nb201_cell(ops: Sequence[str]) -> str:
    """The NAS-Bench-201 cell string for six edge ops, edges in the benchmark's order.

    Edges: node1<-0, node2<-0, node2<-1, node3<-0, node3<-1, node3<-2.
    """
    if len(ops) != 6:
        raise ValueError(f"a NAS-Bench-201 cell has 6 edges, got {len(ops)} ops: {list(ops)}")
    for op in ops:
        if op not in NB201_OPS:
            raise ValueError(f"op {op!r} is not a NAS-Bench-201 op (valid: {', '.join(NB201_OPS)})")
    o = list(ops)
    return f"|{o[0]}~0|+|{o[1]}~0|{o[2]}~1|+|{o[3]}~0|{o[4]}~1|{o[5]}~2|"


class TableModel:
    """Trials looked up in the NAS-Bench-201 12-epoch table.

    A trial's cell comes from its params: a ``cell`` string param, or six op
    params ``{edge_prefix}0 .. {edge_prefix}5`` with NAS-Bench-201 op names.
    The dataset comes from the trial config's ``dataset`` (cifar10, cifar100,
    imagenet). The table holds only the 12-epoch accuracy, so the per-epoch
    curve is synthetic: it rises from chance and ends exactly at the table's
    ``{dataset}-val`` value at the last epoch (``accuracy``, in %); the last
    report also carries ``test_accuracy``. The table has no training times:
    every trial takes ``trial_seconds`` of virtual time, jittered per epoch.
    """

    def __init__(
        self,
        path: str | Path,
        trial_seconds: float = 60.0,
        jitter: float = 0.1,
        edge_prefix: str = "e",
        metric: str = "accuracy",
    ) -> None:
        self.trial_seconds = _check_positive("trial_seconds", trial_seconds)
        self.jitter = _check_positive("jitter", jitter, allow_zero=True)
        self.edge_prefix = edge_prefix
        self.metric = metric
        self._rows = self._load(Path(path))

    @staticmethod
    def _load(path: Path) -> dict[str, dict[str, float]]:
        if not path.exists():
            raise FileNotFoundError(f"{path}: NAS-Bench-201 table not found")
        rows: dict[str, dict[str, float]] = {}
        with open(path, newline="") as fh:
            for row in csv.DictReader(fh):
                cell = row.pop("cellstr")
                row.pop("index", None)
                rows[cell] = {key: float(value) for key, value in row.items()}
        return rows

    def __len__(self) -> int:
        return len(self._rows)

    def best(self, dataset: str = "cifar10", split: str = "val") -> float:
        """The table's best accuracy for ``dataset``/``split`` (the optimum a search can reach)."""
        column = f"{self._dataset(dataset)}-{split}"
        return max(row[column] for row in self._rows.values())

    def lookup(self, params: Mapping[str, Any]) -> dict[str, float]:
        """The table row for a trial's params."""
        cell = self.cell_of(params)
        try:
            return self._rows[cell]
        except KeyError:
            raise KeyError(f"cell {cell!r} is not in the NAS-Bench-201 table") from None

    def cell_of(self, params: Mapping[str, Any]) -> str:
        if "cell" in params:
            return str(params["cell"])
        names = [f"{self.edge_prefix}{i}" for i in range(6)]
        missing = [n for n in names if n not in params]
        if missing:
            raise KeyError(f"params need a 'cell' string or the six edge ops {names}; missing {missing}")
        return nb201_cell([str(params[n]) for n in names])

    @staticmethod
    def _dataset(name: str) -> str:
        try:
            return NB201_DATASETS[str(name).lower()]
        except KeyError:
            raise ValueError(
                f"dataset {name!r} is not in the NAS-Bench-201 table (valid: cifar10, cifar100, imagenet)"
            ) from None

    def plan(self, config: Mapping[str, Any], rng: np.random.Generator) -> TrialPlan:
        dataset = self._dataset(config.get("dataset", "cifar10"))
        row = self.lookup(config["params"])
        epochs = int(config.get("epochs", 12))
        final, test = row[f"{dataset}-val"], row[f"{dataset}-test"]
        chance = _NB201_CHANCE[dataset]
        tau = epochs / 3.0
        norm = 1.0 - math.exp(-epochs / tau)
        metrics: list[dict[str, float]] = []
        for epoch in range(1, epochs + 1):
            frac = (1.0 - math.exp(-epoch / tau)) / norm
            value = chance + (final - chance) * frac
            metrics.append({self.metric: value, "epoch": float(epoch), "steps": float(epoch)})
        metrics[-1]["test_accuracy"] = test
        return TrialPlan(_epoch_seconds(self.trial_seconds, epochs, self.jitter, rng), tuple(metrics))


# Synthetic learning curves ---------------------------------------------------------------------


def _stable_unit(*parts: object) -> float:
    """A number in [0, 1) that depends only on ``parts`` (not on PYTHONHASHSEED)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64


class CurveModel:
    """Synthetic learning curves: ``acc(epoch) = a - b * exp(-epoch / c)`` plus noise.

    ``a`` (the asymptote) is a smooth, seeded function of the params, so a
    search has something to find: numeric params score by their distance to a
    hidden optimum (in log10 for positive values, as learning rates are
    searched), categorical ones by a seeded offset per choice. ``b`` and ``c``
    (how far below and how slowly) come from the trial's generator. Each
    epoch's duration is lognormal around ``epoch_seconds``.
    """

    def __init__(
        self,
        seed: int = 0,
        optimum: Mapping[str, float] | None = None,
        epoch_seconds: float = 5.0,
        jitter: float = 0.3,
        noise: float = 0.005,
        metric: str = "accuracy",
    ) -> None:
        self.seed = int(seed)
        self.optimum = dict(optimum or {})
        self.epoch_seconds = _check_positive("epoch_seconds", epoch_seconds)
        self.jitter = _check_positive("jitter", jitter, allow_zero=True)
        self.noise = _check_positive("noise", noise, allow_zero=True)
        self.metric = metric

    def asymptote(self, params: Mapping[str, Any]) -> float:
        """The curve's ceiling for these params, in (0.1, 0.95]."""
        penalty = 0.0
        for name, value in sorted(params.items()):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                penalty += 0.1 * _stable_unit(self.seed, name, value)
                continue
            x = float(value)
            target = self.optimum.get(name)
            if target is None:
                target = 10 ** (-4 + 4 * _stable_unit(self.seed, name)) if x > 0 else 0.0
            if x > 0 and target > 0:
                distance = math.log10(x / target)
            else:
                distance = (x - target) / (abs(target) + 1.0)
            penalty += 0.15 * distance**2
        return 0.1 + 0.85 * math.exp(-penalty)

    def plan(self, config: Mapping[str, Any], rng: np.random.Generator) -> TrialPlan:
        epochs = int(config.get("epochs", 10))
        a = self.asymptote(config["params"])
        b = (a - 0.1) * rng.uniform(0.6, 1.0)
        c = rng.uniform(0.1, 0.5) * epochs
        seconds = _epoch_seconds(self.epoch_seconds * epochs, epochs, self.jitter, rng)
        metrics = []
        for epoch in range(1, epochs + 1):
            value = a - b * math.exp(-epoch / c) + float(rng.normal(0.0, self.noise))
            metrics.append({self.metric: value, "epoch": float(epoch), "steps": float(epoch)})
        return TrialPlan(seconds, tuple(metrics))


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
        self.recovery_seconds = _check_positive("recovery_seconds", recovery_seconds, allow_zero=True)
        self.dispatch_latency = _check_positive("dispatch_latency", dispatch_latency, allow_zero=True)
        self.controller_time_scale = _check_positive("controller_time_scale", controller_time_scale, allow_zero=True)
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
        self._now = 0.0
        self._real_mark: float | None = None  # real time the controller got the last batch
        self._closed = False
        self.controller_seconds = 0.0  # real seconds charged to the controller
        self.counts = {"submitted": 0, "ok": 0, "lost": 0, "cancelled": 0, "failures": 0, "events_calls": 0}
        self.join_seconds = _check_positive("join_seconds", join_seconds, allow_zero=True)
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
        plan = self.model.plan(request.config.to_dict(), rng)
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
        run.history.append([run.epoch, metrics, at])
        out: list[Event] = [Report(number, run.epoch, metrics, at, name)]
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
