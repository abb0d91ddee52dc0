"""What the campaign's trials cost: the trial model (:mod:`cluster.trial_cost`) fed with each report, each run
that ends (less its start-up: :func:`startup`) and each running trial's seconds so far (a lower bound on its run,
at each working-out over the running trials), and what the loop reads from it.

- the typical run (the dispatcher's queue depth and batch size: the median of the last 64 runs);
- a trial's predicted duration (seconds per example times the examples it will see, where the trainer reports
  ``examples``; else the durations of similar trials), for placement and the time budget;
- the start-ups apart: a fresh worker's imports (paid once per worker) and a run's restart (every later run pays
  it again: a segment's ranks joining), and the share of trials promoted at each rung (a running trial's later
  segments in the expected end: :mod:`search.loop.later_segments`);
- the slot-seconds spent (slots x seconds of every run that ended, pruned, failed and lost ones included) and one
  more trial's expected cost (the mean of the trials seen, so the pruning and failure rates are in it), for a
  budget in slot- or GPU-hours and the ETA;
- with ``records`` (``sampler = "cost_tpe"``), each trial's slot-seconds so far, recorded on it at each ended run,
  before its tell (:func:`search.sampling.cost_tpe.record_cost`);
- each run's peak device memory (:attr:`~cluster.outcome.Outcome.device_peak`).

The campaign hands it to its executor (``TrialExecutor.predict_with``, as a
:class:`~cluster.trial_cost.TrialPredictions`), so the executor's predictions read this one model too: a batch
job's walltime against each trial's :meth:`TrialCosts.duration` (:mod:`cluster.walltimes`), the packing's device
memory (:class:`cluster.packing.MemoryModel`, ``gpu_memory = "auto"``).

A resumed campaign, and ``status``, start it from the trials the study recorded (:meth:`TrialCosts.load`): each
one's last run (a retried trial's earlier runs are not recorded).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from optuna.trial import TrialState

from cluster.outcome import Outcome
from cluster.trial_cost import Basis, Estimate, Quantity, Resources, TrialCostModel
from cluster.trial_cost.estimate import Z90
from cluster.walltimes import left_share
from search.loop.eta import Chain, Eta, InFlight, drift_of, estimate_end, residual, trend_of
from search.loop.later_segments import Promotions, Restarts, later_segments
from search.loop.trials import ReportRecord, RunningTrial
from search.sampling.cost_tpe import record_cost
from search.store.records import TrialRecord

__all__ = [
    "TrialCosts",
    "from_progress",
    "from_first_epoch",
    "DURATION_WINDOW",
    "HOUR",
    "sample_estimate",
    "refresh_interval",
    "run_of",
]

HOUR = 3600.0  # seconds: budgets are in slot- or GPU-hours
DURATION_WINDOW = 64  # recent trial durations the dispatch depth is derived from
HISTORY = 512  # the costs of the last trials that ended, for how far the mean cost drifts (:func:`drift_of`)
SEEN = 16  # the recent trials the expected end draws the trials to start from: this many, or one per slot
EXAMPLES = "examples"  # the metric a trainer reports its training examples seen in (the built-in one does)
EPOCH_SECONDS = "epoch_seconds"  # the metric a trainer reports an epoch's own seconds in (the built-in one does)


def refresh_interval(running: int, typical_run: float | None = None) -> float:
    """Clock seconds between two workings-out over every running trial (the ETA, a resource budget's look): at most
    one a second, one per 10 s per 1,000 trials running (each costs tens of microseconds per trial), and one per
    tenth of a typical run."""
    return max(1.0, running / 100.0, (typical_run or 0.0) / 10.0)


def sample_estimate(values: Iterable[float]) -> Estimate:
    """The mean of ``values`` and a 90% interval for one more like them (normal; one value: a factor of 2)."""
    seen = [v for v in values if v >= 0 and math.isfinite(v)]
    if not seen:
        return Estimate(0.0, 0.0, 0.0)
    mean = statistics.fmean(seen)
    spread = statistics.stdev(seen) if len(seen) > 1 else mean * math.log(2.0)
    half = Z90 * spread * math.sqrt(1.0 + 1.0 / len(seen))
    return Estimate(mean, max(0.0, mean - half), mean + half, Basis.SAMPLE, len(seen))


class TrialCosts:
    """The campaign's trial model and its ledger of slot-seconds (see the module's docstring)."""

    def __init__(
        self, model: TrialCostModel | None = None, records: bool = False, reduction_factor: int | None = None
    ) -> None:
        """``reduction_factor``: the rung pruner's (its prior chance of a promotion at a rung is one over it; None:
        no rung pruner, a trial's segments all run)."""
        self.model = model or TrialCostModel()
        self.records = (
            records  # each ended run: the trial's slot-seconds so far recorded on it, for a cost-aware sampler
        )
        self.spent = 0.0  # slot-seconds of the runs that ended
        self._per_trial: dict[int, float] = {}  # slot-seconds each trial's ended runs took
        self._widths: dict[int, int] = {}  # each trial's width (its last run's)
        # each trial's fresh worker's start-up (its imports: :func:`startup` of a worker's first run), paid once
        self._startups: dict[int, float] = {}
        # each worker a run ended on, and when: the runs started there after it pay no worker's start-up
        self._warm: dict[str, float] = {}
        self.restarts = Restarts()  # the start-ups of the other runs (a segment's ranks joining): each run pays one
        self.promotions = Promotions(reduction_factor)  # the share of trials promoted at each rung
        self._last = -1  # the highest trial number a run ended of
        # the start-ups the first runs on fresh workers paid (their imports): for a first run that has not told its own
        self._fresh: collections.deque[float] = collections.deque(maxlen=DURATION_WINDOW)
        self._totals = _Totals()  # their count, sum and sum of squares: one more trial's cost without a pass over them
        self._epoch_examples: collections.deque[float] = collections.deque(maxlen=DURATION_WINDOW)
        # how much a trial's epochs vary (relative), of the last runs that ended: for a running trial's first epochs
        self._epoch_spreads: collections.deque[float] = collections.deque(maxlen=DURATION_WINDOW)
        # (epochs run, epochs planned) of the last runs that ended where steps are epochs: how far trials go
        self._finals: collections.deque[tuple[int, int]] = collections.deque(maxlen=DURATION_WINDOW)

    # --- what it learns from --------------------------------------------------------------------

    def load(self, records: Iterable[TrialRecord]) -> None:
        """The finished trials a study recorded (a resumed campaign's, or ``status``'s)."""
        for record in records:
            if record.state in (TrialState.RUNNING, TrialState.WAITING) or not record.duration:
                continue
            width = record.width or 1
            examples = (record.metrics or {}).get(EXAMPLES) or 0.0
            full = record.state == TrialState.COMPLETE and not record.stop_reason
            epochs = int((record.config or {}).get("epochs") or 0)
            self._ran(record.number, record.params, width, record.duration, full, float(examples), epochs)

    def reported(self, running: RunningTrial, at: float, metrics: Mapping[str, float]) -> None:
        """A running trial's report: the examples its run has seen so far (a segment's since its checkpoint) over
        its seconds so far, less its start-up (:func:`startup`; a run of several epochs: from its second report, the
        first holding a fresh worker's imports as much as its epoch)."""
        examples = (metrics.get(EXAMPLES) or 0.0) - _examples_before(running)
        if run_epochs(running) > 1 and len(_own_reports(running)) < 2:
            return
        if examples > 0 and running.started_at is not None and at > running.started_at:
            seconds = at - running.started_at - startup(running)
            if seconds > 0:
                resources = Resources(running.width)
                self.model.observe_progress(running.number, running.config.params, resources, seconds, examples)

    def ended(self, running: RunningTrial, outcome: Outcome) -> None:
        """A run ended (a pruned, failed or lost one too: each run costs its slots)."""
        seconds = outcome.duration
        if seconds is None or seconds <= 0:
            return
        examples = max(0.0, (outcome.metrics.get(EXAMPLES) or _last_examples(running)) - _examples_before(running))
        full = outcome.ok and not outcome.stopped
        if outcome.device_peak:  # what the executor's packing reads (gpu_memory = "auto")
            self.model.observe_memory(
                running.number, running.config.params, Resources(running.width), outcome.device_peak
            )
        first = startup(running)
        self._ran(
            running.number, running.config.params, running.width, seconds, full, examples, run_epochs(running), first
        )
        if (spread := epoch_spread(running)) is not None:
            self._epoch_spreads.append(spread)
        if (ran := _epochs_run(running)) is not None and (outcome.ok or outcome.stopped):
            self._finals.append((ran, running.config.epochs))
        self.promotions.decided(running, outcome.ok)
        if self._fresh_worker(running):  # begun before a run ended on its worker: it paid the worker's imports
            self._warm.setdefault(running.worker, (running.started_at or 0.0) + seconds)
            if first:
                self._fresh.append(first)
                self._startups[running.number] = first
        elif startup_measured(running):
            self.restarts.add(running.width, first)
        if self.records:
            record_cost(running.trial, self.trial_spent(running.number))

    def _ran(
        self,
        number: int,
        params: Mapping[str, Any],
        width: int,
        seconds: float,
        full: bool,
        examples: float,
        epochs: int,
        first: float = 0.0,
    ) -> None:
        """A run of ``seconds`` ended; the model learns it less its start-up ``first`` (paid once per worker)."""
        learnt = seconds - first if seconds > first else seconds
        self.model.observe_run(number, params, Resources(width), learnt, full=full, examples=examples)
        self.spent += seconds * width
        self._last = max(self._last, number)
        before = self._per_trial.get(number)
        self._per_trial[number] = (before or 0.0) + seconds * width
        self._widths[number] = width
        self._totals.replace(before, self._per_trial[number])
        if full and examples > 0 and epochs > 0:
            self._epoch_examples.append(examples / epochs)

    # --- what it says ---------------------------------------------------------------------------

    def typical_run(self) -> float | None:
        """The median of the last :data:`DURATION_WINDOW` runs (None: none ended yet)."""
        return self.model.recent_median(Quantity.RUN, DURATION_WINDOW)

    def duration(self, params: Mapping[str, Any], width: int, epochs: int) -> Estimate:
        """A full run's seconds for a configuration: per example times its examples (``epochs`` of them), where the
        trainer reports examples; else the durations of similar trials."""
        per_epoch = statistics.median(self._epoch_examples) if self._epoch_examples else 0.0
        return self.model.predict_duration(params, Resources(width), examples=per_epoch * epochs)

    def left(self, params: Mapping[str, Any], width: int, epochs: int, started: float | None, now: float) -> Estimate:
        """Seconds a running trial (``started``; None: queued) still has, predicted: its full run, given that it has
        run so long already (:func:`~search.loop.eta.residual`)."""
        full = self.duration(params, width, epochs)
        return residual(full, max(0.0, now - started) if started is not None else 0.0)

    def lefts(self, running: Sequence[RunningTrial], now: float) -> list[Estimate]:
        """:meth:`left` of each running trial, their full runs predicted together (from its own progress where it
        has reported epochs: :func:`from_progress`)."""
        self._bound(running, now)
        return [
            residual(full, max(0.0, now - r.started_at) if r.started_at is not None else 0.0)
            for full, r in zip(self.wholes(running), running)
        ]

    def _bound(self, running: Sequence[RunningTrial], now: float) -> None:
        """The running trials' seconds so far less their start-up (:meth:`startups`), lower bounds on their runs,
        into the model (censored points)."""
        self.model.forget_running(r.number for r in running)
        for r, first in zip(running, self.startups(running, now)):
            if r.started_at is not None and now - r.started_at > first:
                self.model.observe_running(r.number, r.config.params, Resources(r.width), now - r.started_at - first)

    def startups(self, running: Sequence[RunningTrial], now: float) -> list[float]:
        """Each running trial's start-up: its own (:func:`startup`), and before its run has told it, on a fresh worker
        (no run ended there yet), the median of those the first runs on fresh workers paid (the worker's imports),
        at most its seconds so far; 0 on a worker a run ended on."""
        told = [first for r in running if self._fresh_worker(r) and (first := startup(r)) > 0]
        typical = statistics.median([*self._fresh, *told]) if self._fresh or told else 0.0
        out = []
        for r in running:
            own = startup(r)
            if own > 0 or len(_own_reports(r)) >= 2 or not self._fresh_worker(r) or r.started_at is None:
                out.append(own)
            else:
                out.append(min(typical, max(0.0, now - r.started_at)))
        return out

    def _fresh_worker(self, running: RunningTrial) -> bool:
        """Whether a run began on a fresh worker: before any run ended there (the runs started together on a worker
        of several slots all pay its imports)."""
        warm = self._warm.get(running.worker)
        if not running.worker:
            return False
        return warm is None or (running.started_at is not None and running.started_at < warm)

    def wholes(self, running: Sequence[RunningTrial], stops: bool = False, starts: bool = False) -> list[Estimate]:
        """Each running trial's whole run: from its own progress (:func:`from_progress`), else the model's, at most its
        epochs at its first epoch's time (:func:`from_first_epoch`); ``stops``: to the epoch trials that went as far
        have ended at so far (:meth:`final_epoch`: stopped at a target, pruned), not to its last; ``starts``: the
        model's with the start-up the run pays in it (:meth:`start_up`; the model learns runs less theirs)."""
        fulls = self.rests([run_of(r) for r in running])
        spreads = [spread for r in running if (spread := epoch_spread(r)) is not None] + list(self._epoch_spreads)
        typical = statistics.median(spreads) if spreads else 0.25
        out = []
        for full, r in zip(fulls, running):
            final = self.final_epoch(r) if stops else None
            if starts and full.known and not _own_reports(r):
                full = _plus(full, self.start_up(r))
            out.append(from_progress(r, typical, final) or _at_most(full, from_first_epoch(r, typical, final)))
        return out

    def rests(self, runs: Sequence[tuple[Mapping[str, Any], int, int, int, int]]) -> list[Estimate]:
        """Each run's seconds from the epoch it resumes at, ``(params, width, epochs, begun, start)``: its segment's
        whole run (epochs ``begun + 1`` to ``epochs``, :meth:`durations`) times the part of it a run that resumes at
        epoch ``start`` has left (:func:`cluster.walltimes.left_share`). The one rule for a run that resumes (a later
        segment, a retry from its checkpoint, a resumed campaign's trial): the time budget's placement, the resource
        budget's committed cost and its gate on a trial's next run read it."""
        fulls = self.durations([(params, width, max(1, epochs - begun)) for params, width, epochs, begun, _s in runs])
        return [
            full.times(left_share(start, epochs, begun)) for full, (_p, _w, epochs, begun, start) in zip(fulls, runs)
        ]

    def start_up(self, running: RunningTrial) -> float:
        """The start-up a run that has not reported pays: a fresh worker's imports (the median the first runs on
        fresh workers paid), else a restart (:class:`~search.loop.later_segments.Restarts`: its ranks joining, the
        data's loading), which a queued run pays too."""
        if running.started_at is not None and self._fresh_worker(running):
            return statistics.median(self._fresh) if self._fresh else 0.0
        return self.restarts.typical(running.width)

    def later(self, running: Sequence[RunningTrial]) -> list[Chain]:
        """The later segments each running trial may run after this one (a trial promoted at a rung), each its
        epochs at the model's seconds and a restart, at the chance it gets there."""
        chains = []
        for i, r in enumerate(running):
            segments = later_segments(r, self.promotions)
            if not segments:
                continue
            restart = self.restarts.typical(r.width)
            fulls = self.durations([(r.config.params, s.width, s.end - s.start) for s in segments])
            seconds = tuple(_plus(full, restart) for full in fulls)
            chains.append(Chain(i, seconds, tuple(s.chance for s in segments), r.width))
        return chains

    def final_epoch(self, running: RunningTrial) -> tuple[float, float] | None:
        """The epoch a running trial is expected to end at, given the epoch it has reported: the mean and standard
        deviation of those of the recent runs of as many epochs that ended past it (None: none did, or its steps
        are not epochs: its last)."""
        reached = running.reports[-1][0] if running.reports else 0
        past = [ran for ran, planned in self._finals if planned == running.config.epochs and ran > reached]
        if not past:
            return None
        return statistics.fmean(past), statistics.pstdev(past)

    def durations(self, configs: Sequence[tuple[Mapping[str, Any], int, int]]) -> list[Estimate]:
        """:meth:`duration` of each ``(params, width, epochs)``, the fit's in one matrix product."""
        per_epoch = statistics.median(self._epoch_examples) if self._epoch_examples else 0.0
        shapes = [(params, Resources(width)) for params, width, _epochs in configs]
        if per_epoch > 0 and self.model.count(Quantity.PER_EXAMPLE):
            rates = self.model.predict_many(Quantity.PER_EXAMPLE, shapes)
            return [rate.times(per_epoch * epochs) for rate, (_p, _w, epochs) in zip(rates, configs)]
        quantity = Quantity.DURATION if self.model.count(Quantity.DURATION) else Quantity.RUN
        return self.model.predict_many(quantity, shapes)

    def eta(
        self,
        running: Iterable[RunningTrial],
        to_start: int,
        slots: int,
        now: float,
        time_left: float | None = None,
        cost_left: float | None = None,
    ) -> Eta | None:
        """The campaign's expected end (:func:`~search.loop.eta.estimate_end`) with these trials in flight."""
        running = list(running)
        self._bound(running, now)
        fulls = self.wholes(running, stops=True, starts=True)
        in_flight = [
            InFlight(
                full,
                max(0.0, now - r.started_at) if r.started_at is not None else 0.0,
                r.width,
                r.started_at is not None,
            )
            for full, r in zip(fulls, running)
        ]
        later = self.later(running)
        imports = [first if self._fresh_worker(r) else 0.0 for r, first in zip(running, self.startups(running, now))]
        rest = [0.0] * len(running)  # each trial's later segments' expected slot-seconds: a trial to start pays them
        for chain in later:
            rest[chain.after] = chain.width * sum(e.mean * p for e, p in zip(chain.seconds, chain.chances))
        numbers = [r.number for r in running]
        numbered = self._numbered(in_flight, imports, slots, numbers, rest)
        guessed = {r.number for r in running if _epoch_seconds(r) is None}  # the model's guess: not in the trend
        trend = self.trend([seen for seen in numbered if seen[0] not in guessed], numbers, to_start)
        seen = [(cost * trend, width) for _n, cost, width in numbered]
        drift = self.drift(slots, to_start)
        return estimate_end(in_flight, to_start, seen, slots, time_left, cost_left, drift, later)

    def trend(self, numbered: Sequence[tuple[int, float, int]], flying: Sequence[int], to_start: int) -> float:
        """The factor the trials to start cost by the trend of the costs seen (:func:`~search.loop.eta.trend_of`),
        numbered from the next trial's on (1: none to start)."""
        if not to_start:
            return 1.0
        following = 1 + max([*flying, self._last])
        return trend_of([(n, cost) for n, cost, _w in numbered if n >= 0], (following, following + to_start - 1))

    def drift(self, slots: int, to_start: int = 0) -> float:
        """How far the mean cost of ``to_start`` trials may be from the recent ones' (log-spread): the drift per
        window of :data:`SEEN` (or ``slots``) trials in the campaign's own history (:func:`~search.loop.eta.drift_of`),
        grown as a random walk's mean over the windows ahead (``h`` windows: by sqrt((h + 1)(2h + 1) / 6h))."""
        window = max(SEEN, slots)
        ahead = max(1.0, to_start / window)
        return drift_of(list(self._per_trial.values())[-HISTORY:], window) * math.sqrt(
            (ahead + 1) * (2 * ahead + 1) / (6 * ahead)
        )

    def seen(
        self,
        in_flight: Sequence[InFlight] = (),
        startups: Sequence[float] = (),
        slots: int = 0,
        numbers: Sequence[int] = (),
        rest: Sequence[float] = (),
    ) -> list[tuple[float, int]]:
        """What the trials seen cost, ``(slot-seconds, width)``, for the trials to start: the last :data:`SEEN` (or
        one per of the ``slots``, if more) whose runs ended (pruned and failed ones in it: the recent ones, as the
        sampler moves to other costs) and the ones ``in_flight`` that have run, at their
        predicted whole runs (so the long ones count before they end); each less its fresh worker's start-up
        (:func:`startup`, ``startups`` for those in flight: a worker's imports are paid once, not by every trial on
        it; a restart is paid by every run). With their trials' ``numbers``, a trial in flight counts its earlier
        runs too (not among those ended) and ``rest``, its later segments' expected slot-seconds: a whole trial."""
        return [(cost, width) for _n, cost, width in self._numbered(in_flight, startups, slots, numbers, rest)]

    def _numbered(
        self,
        in_flight: Sequence[InFlight],
        startups: Sequence[float],
        slots: int,
        numbers: Sequence[int],
        rest: Sequence[float],
    ) -> list[tuple[int, float, int]]:
        """:meth:`seen`, each with its trial's number (-1: a trial in flight whose number is not given)."""
        flying = set(numbers)
        ended = [
            (n, max(0.0, cost - self._startups.get(n, 0.0) * self._widths.get(n, 1)), self._widths.get(n, 1))
            for n, cost in itertools.islice(reversed(self._per_trial.items()), max(SEEN, slots))
            if n not in flying
        ]
        firsts = list(startups) + [0.0] * (len(in_flight) - len(startups))
        before = [self._per_trial.get(n, 0.0) - self._startups.get(n, 0.0) * self._widths.get(n, 1) for n in numbers]
        before += [0.0] * (len(in_flight) - len(before))
        after = list(rest) + [0.0] * (len(in_flight) - len(rest))
        named = list(numbers) + [-1] * (len(in_flight) - len(numbers))
        for trial, first, earlier, later, n in zip(in_flight, firsts, before, after, named):
            if trial.ran > 0 and trial.full.known:
                whole = max(trial.ran, trial.ran + residual(trial.full, trial.ran).mean) - first
                ended.append((n, max(0.0, whole) * trial.width + max(0.0, earlier) + later, trial.width))
        return ended

    def per_trial(self, running: Iterable[RunningTrial] = ()) -> Estimate:
        """Slot-seconds one more trial costs: the mean over the trials whose runs ended (pruned and failed ones in
        it), or, before any ended, over the running trials' predicted full runs."""
        if self._per_trial:
            return self._totals.estimate()
        running = list(running)
        predicted = self.durations([(r.config.params, r.width, run_epochs(r)) for r in running])
        return sample_estimate(e.mean * r.width for e, r in zip(predicted, running) if e.known)

    def trial_spent(self, number: int) -> float:
        """Slot-seconds trial ``number``'s ended runs took (0: none ended)."""
        return self._per_trial.get(number, 0.0)

    @property
    def trials_ended(self) -> int:
        return len(self._per_trial)


def run_epochs(running: RunningTrial) -> int:
    """The epochs a trial's run trains: its segment's, from the checkpoint it starts at to its config's ``epochs``
    (a promoted elastic trial's, a PBT member's next interval; a trial's first run: all of them)."""
    return max(1, running.config.epochs - running.segment().start_epoch)


def run_of(running: RunningTrial) -> tuple[Mapping[str, Any], int, int, int, int]:
    """A running trial's run as :meth:`TrialCosts.rests` takes it: from the epoch it was sent to resume at
    (:attr:`~search.loop.trials.RunningTrial.start_epoch`) in the segment it runs."""
    config = running.config
    return config.params, running.width, config.epochs, running.segment().start_epoch, running.start_epoch


def _examples_before(running: RunningTrial) -> float:
    """The examples a trial had seen at its run's start (its segment's checkpoint's; 0: from scratch)."""
    return float(running.segment().examples or 0) if running.segment().start_epoch else 0.0


def _own_reports(running: RunningTrial) -> list[ReportRecord]:
    """A running trial's reports from this run: after its start and past its segment's first epoch (an earlier
    segment's, or an earlier controller's, are not this run's epochs)."""
    started, first = running.started_at, running.segment().start_epoch
    if started is None:
        return []
    return [report for report in running.reports if report[2] > started and report[0] > first]


def _epoch_seconds(running: RunningTrial) -> list[float] | None:
    """The seconds of a running trial's last epochs in this run but its first (which holds the start-up: a fresh
    worker's imports, the data's loading, a segment's ranks joining), at most 16, where its steps are its epochs
    (``1..epochs``, the built-in trainer's); None: fewer than two reports in this run, or steps that are not
    epochs."""
    epochs, started, own = running.config.epochs, running.started_at, _own_reports(running)
    if started is None or not own or epochs <= 0:
        return None
    steps = [step for step, _m, _at in own]
    if max(steps) > epochs or steps[-1] != max(steps):
        return None
    times = [started] + [t for _s, _m, t in own]
    seconds = [b - a for a, b in zip(times, times[1:])]
    if min(seconds) < 0:  # reports out of order: not epochs one after another
        return None
    return seconds[1:][-16:] or None


def startup(running: RunningTrial) -> float:
    """How much longer a run's first epoch took than its later ones (a fresh worker's imports, the data's loading,
    a segment's ranks joining); with one report in this run, how much longer than the epoch's own seconds, where
    the trainer reports them (:data:`EPOCH_SECONDS`: a run pruned at its first rung is mostly start-up). 0: no
    report, or one without its seconds, or steps that are not epochs."""
    own = _own_reports(running)
    if not own or running.started_at is None:
        return 0.0
    first = own[0][2] - running.started_at
    later = _epoch_seconds(running)
    if later:
        return max(0.0, first - statistics.fmean(later))
    own_seconds = own[0][1].get(EPOCH_SECONDS)
    if len(own) == 1 and own_seconds is not None and math.isfinite(own_seconds) and own_seconds >= 0:
        return max(0.0, first - own_seconds)
    return 0.0


def startup_measured(running: RunningTrial) -> bool:
    """Whether :func:`startup` measured a run's start-up (0 included): two reports in this run, or one with its
    epoch's own seconds."""
    own = _own_reports(running)
    return _epoch_seconds(running) is not None or (len(own) == 1 and own[0][1].get(EPOCH_SECONDS) is not None)


def _plus(estimate: Estimate, seconds: float) -> Estimate:
    """``estimate`` with ``seconds`` more (a run's start-up on top of its training)."""
    if seconds <= 0:
        return estimate
    e = estimate
    return dataclasses.replace(e, mean=e.mean + seconds, low=e.low + seconds, high=e.high + seconds)


def epoch_spread(running: RunningTrial) -> float | None:
    """The spread of a running trial's epochs relative to their mean (None: fewer than two)."""
    seconds = _epoch_seconds(running)
    if seconds is None or len(seconds) < 2 or statistics.fmean(seconds) <= 0:
        return None
    return statistics.stdev(seconds) / statistics.fmean(seconds)


def from_progress(
    running: RunningTrial, typical_spread: float = 0.25, final: tuple[float, float] | None = None
) -> Estimate | None:
    """A running trial's whole run from its own reports, where its steps are its epochs: the time to its last report
    and the epochs left at its mean epoch (its first left out), with their spread (``typical_spread`` of an epoch,
    relative, before it has three); the epochs left are to its last, or to ``final`` (the mean and standard deviation
    of the epoch it is expected to end at); a trial asked to stop ends at its next report. None: fewer than two
    reports, or steps that are not epochs."""
    seconds = _epoch_seconds(running)
    if seconds is None or running.started_at is None:
        return None
    last, _metrics, at = _own_reports(running)[-1]
    mean = statistics.fmean(seconds)
    spread = statistics.stdev(seconds) if len(seconds) >= 2 else mean * typical_spread
    end, end_spread = final if final is not None and not running.stop_reason else (running.config.epochs, 0.0)
    left = 1 if running.stop_reason else max(0.0, end - last)
    ran = at - running.started_at
    whole = ran + left * mean
    half = Z90 * (spread * (math.sqrt(left) + left / math.sqrt(len(seconds))) + end_spread * mean)
    return Estimate(whole, max(ran, whole - half), whole + half, Basis.SAMPLE, last)


def from_first_epoch(
    running: RunningTrial, typical_spread: float = 0.25, final: tuple[float, float] | None = None
) -> Estimate | None:
    """A running trial's whole run from its first epoch alone: its epochs (or ``final``'s, as in
    :func:`from_progress`) at that epoch's time, with ``typical_spread`` of an epoch (relative) on each; an upper
    bound as much as an estimate, since the first epoch also holds the start-up (a fresh worker's imports, the
    data's loading). None: no report, or more than one, or steps that are not epochs."""
    epochs, started, own = running.config.epochs, running.started_at, _own_reports(running)
    begun = running.segment().start_epoch
    if started is None or len(own) != 1 or epochs - begun <= 1:
        return None
    step, _metrics, at = own[0]
    if step != begun + 1:
        return None
    end, end_spread = final if final is not None else (float(epochs), 0.0)
    first = at - started
    left = max(0.0, end - step)
    whole = first * (1 + left)
    half = Z90 * first * (typical_spread * (math.sqrt(left) + left) + end_spread)
    return Estimate(whole, max(first, whole - half), whole + half, Basis.SAMPLE, 1)


def _at_most(full: Estimate, bound: Estimate | None) -> Estimate:
    """``full``, or ``bound`` where that is shorter than ``full``'s interval allows."""
    return bound if bound is not None and bound.mean < full.low else full


def _epochs_run(running: RunningTrial) -> int | None:
    """The epochs a run that ended reported, where its steps are its epochs (``1..epochs``; None: none, or not)."""
    steps = [step for step, _m, _at in running.reports]
    if not steps or min(steps) < 1 or max(steps) > running.config.epochs or steps[-1] != max(steps):
        return None
    return steps[-1]


def _last_examples(running: RunningTrial) -> float:
    for _step, metrics, _at in reversed(running.reports):
        if metrics.get(EXAMPLES):
            return float(metrics[EXAMPLES])
    return 0.0


class _Totals:
    """The count, sum and sum of squares of values that may each be replaced (a retried trial's cost grows)."""

    def __init__(self) -> None:
        self.n, self.total, self.squares = 0, 0.0, 0.0

    def replace(self, old: float | None, new: float) -> None:
        if old is None:
            self.n += 1
        else:
            self.total -= old
            self.squares -= old * old
        self.total += new
        self.squares += new * new

    def estimate(self) -> Estimate:
        """As :func:`sample_estimate` of the values."""
        mean = self.total / self.n
        if self.n == 1:
            spread = mean * math.log(2.0)
        else:
            spread = math.sqrt(max(0.0, (self.squares - self.n * mean * mean) / (self.n - 1)))
        half = Z90 * spread * math.sqrt(1.0 + 1.0 / self.n)
        return Estimate(mean, max(0.0, mean - half), mean + half, Basis.SAMPLE, self.n)
