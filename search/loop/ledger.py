"""The controller's account of finished trials: it tells the study, keeps the counts and the best
value, and writes what a finished trial leaves behind (its attributes, its error log).

Deterministic campaigns tell in trial-number order, with a lag of ``parallelism``
asks, so that trial k is sampled from exactly trials 0..k-P-1 whatever the timing
or the worker count: :meth:`Ledger.may_ask` gates the asks and :meth:`Ledger.flush`
tells whatever order now allows.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Mapping

import optuna
from optuna.trial import FrozenTrial, TrialState

from cluster.executor import CANCELLED, ERROR, LOST, Outcome
from search.compat import optuna_private as op
from search.loop.fail_fast import FailFast
from search.loop.oom import device_fields
from search.loop.policies import Verdict
from search.loop.trials import RunningTrial
from search.spec.campaign_spec import CampaignSpec
from search.store.failures import MISSING_METRIC, retried_failures
from search.store.folder import CampaignFolder
from search.store.records import MODEL_SIZE_ATTRS, Attr, encode_history, encode_metrics, write_attrs
from search.store.sinks import ReportSinks
from search.store.warm_marks import is_warm_start
from search.vocab.terms import StopReason, feasible, maximizing

__all__ = ["Ledger", "NEVER_STARTED", "MAX_TRACEBACK", "named_values"]

log = logging.getLogger(__name__)

MAX_TRACEBACK = 20_000
NEVER_STARTED = StopReason.NEVER_STARTED
_KEY = {TrialState.COMPLETE: "complete", TrialState.PRUNED: "pruned", TrialState.FAIL: "failed"}


def tell(study: optuna.Study, trial: optuna.Trial, values: list[float] | None, state: TrialState) -> None:
    """``study.tell(trial, values, state=state)``, less the deep copy of the told trial that it returns."""
    op.tell(study, trial, values, state)  # 5% of the controller's time at 10,000 workers was that copy


class Ledger:
    """Tells the study and counts; a deterministic campaign's trials are told in number order (:meth:`flush`)."""

    def __init__(
        self,
        spec: CampaignSpec,
        study: optuna.Study,
        folder: CampaignFolder,
        sinks: ReportSinks | None = None,
    ) -> None:
        self._spec = spec
        self._sinks = sinks or ReportSinks()  # told trials close their TensorBoard file, end their MLflow run
        self._study = study
        self._folder = folder
        self.counts = {"complete": 0, "pruned": 0, "failed": 0}
        self.best: float | None = None
        self.next_number = 0  # the number the next ask gets
        self._next_to_tell = 0
        self._told: set[int] = set()
        self.waiting: dict[int, tuple[RunningTrial, Outcome, Verdict | None]] = {}  # finished, told in order
        self.fail_fast = FailFast(spec.study.fail_fast)  # this run's first failures, by reason

    @property
    def finished(self) -> int:
        return sum(self.counts.values())

    def load(self, trials: list[FrozenTrial]) -> list[FrozenTrial]:
        """Count the trials already in the study; return those left RUNNING (to run again).

        Enqueued trials still WAITING are the next asks; warm-start copies are told, never counted, and so are
        failed trials that a later trial re-runs (``resume --retry-failed``).
        """
        self.next_number = min((t.number for t in trials if t.state == TrialState.WAITING), default=len(trials))
        resumable = []
        retried = retried_failures(trials)
        for frozen in trials:
            if frozen.state.is_finished():
                self._mark_told(frozen.number)
            if is_warm_start(frozen) or frozen.number in retried:
                continue  # another campaign's trial, or a failure run again: takes none of this budget
            if frozen.state.is_finished():
                self.counts[_KEY.get(frozen.state, "failed")] += 1
            if frozen.state == TrialState.COMPLETE and feasible(frozen.constraints):
                self._track_best(frozen.values)
            elif frozen.state == TrialState.RUNNING:
                resumable.append(frozen)
        return resumable

    # --- the order of tells (deterministic campaigns) ---------------------------------------------

    def asked(self, number: int) -> None:
        self.next_number = number + 1
        self.flush()

    def may_ask(self) -> bool:
        """Deterministic campaigns sample trial k from trials 0..k-P-1 only, once all of them are told."""
        if not self._spec.study.deterministic:
            return True
        return self._next_to_tell >= self.next_number - self._spec.study.parallelism

    def flush(self, all_asked: bool = False) -> None:
        """Tell trial j in number order, once trial j+P has been asked (or, ``all_asked``, the whole budget has).

        The campaign, which knows where every asked trial is, flushes with ``all_asked`` after each finish."""
        if not self._spec.study.deterministic:
            return
        lag = self._spec.study.parallelism
        while self._next_to_tell in self.waiting and (self._next_to_tell + lag < self.next_number or all_asked):
            self._tell(*self.waiting.pop(self._next_to_tell))

    # --- telling ------------------------------------------------------------------------------------

    def finish(self, running: RunningTrial, outcome: Outcome, verdict: Verdict | None) -> None:
        """A trial is done: tell it now, or (deterministic) when its turn comes."""
        if not self._spec.study.deterministic:
            self._tell(running, outcome, verdict)
            return
        self.waiting[running.number] = (running, outcome, verdict)
        self.flush()

    def reject(self, trial: optuna.Trial, reason: str) -> None:
        """A trial whose parameters cannot run: FAIL, without a slot."""
        write_attrs(trial, fail_reason=reason)
        self._study.tell(trial, state=TrialState.FAIL)
        self._mark_told(trial.number)
        self.counts["failed"] += 1
        self.fail_fast.told(trial.number, TrialState.FAIL, "", reason)
        log.info("trial %d rejected before dispatch: %s", trial.number, reason)

    def never_started(self, trial: optuna.Trial) -> None:
        """Asked, never launched (the time budget ran out first): PRUNED, so none stays RUNNING."""
        write_attrs(trial, stop_reason=NEVER_STARTED)
        self._study.tell(trial, state=TrialState.PRUNED)
        self._mark_told(trial.number)
        self.counts["pruned"] += 1

    def _tell(self, running: RunningTrial, outcome: Outcome, verdict: Verdict | None) -> None:
        self._record_outcome(running, outcome)
        verdict = self._verdict(running, outcome, verdict)
        verdict, constraints = self._constraints(running, outcome, verdict)
        trial = running.trial
        if verdict.reason:
            key = Attr.FAIL_REASON if verdict.state == TrialState.FAIL else Attr.STOP_REASON
            write_attrs(trial, **{key: verdict.reason})
        if verdict.state == TrialState.FAIL:
            self._write_failure_log(running, outcome, verdict.reason)
        values = list(verdict.values) if verdict.state == TrialState.COMPLETE else None
        tell(self._study, trial, values, verdict.state)
        self._sinks.finish(running.number, verdict.state.name, values, trial.params)
        self._mark_told(running.number)
        self.counts[_KEY[verdict.state]] += 1
        self.fail_fast.told(
            running.number, verdict.state, outcome.error_type, verdict.reason, verdict.reason.startswith(MISSING_METRIC)
        )
        if verdict.state == TrialState.COMPLETE and feasible(constraints):
            self._track_best(values)
        log.info("trial %d %s%s", running.number, verdict.state.name, f" ({verdict.reason})" if verdict.reason else "")

    def _verdict(self, running: RunningTrial, outcome: Outcome, decided: Verdict | None) -> Verdict:
        """A policy's verdict; else FAIL for an error, PRUNED for a stopped trial, else the spec's metrics."""
        if decided is not None:
            return decided
        if not outcome.ok:
            return Verdict(TrialState.FAIL, (), _failure_reason(outcome))
        if running.pruned_reason:  # a stop whose transition is prune (not target reached, not a resize)
            return Verdict(TrialState.PRUNED, (), running.pruned_reason)
        values: list[float] = []
        for name in self._spec.study.metrics:
            if name not in outcome.metrics:
                got = sorted(outcome.metrics)
                return Verdict(TrialState.FAIL, (), f"{MISSING_METRIC} {name!r} (it returned {got})")
            if not math.isfinite(outcome.metrics[name]):
                return Verdict(TrialState.FAIL, (), f"metric {name!r} is {outcome.metrics[name]}")
            values.append(float(outcome.metrics[name]))
        return Verdict(TrialState.COMPLETE, tuple(values))

    def _constraints(
        self, running: RunningTrial, outcome: Outcome, verdict: Verdict
    ) -> tuple[Verdict, dict[str, float]]:
        """Set the trial's ``[study] constraints`` values (``Trial.set_constraint``, read by the sampler at tell).

        From the trainer's final metrics, else (a stopped trial) its last report that has them all;
        a complete trial without a finite value for each is FAIL; a failed one gets none.
        """
        names = self._spec.study.constraints
        if not names or verdict.state == TrialState.FAIL:
            return verdict, {}
        found = _finite(outcome.metrics, names) or next(
            (values for _step, metrics in reversed(running.history()) if (values := _finite(metrics, names))), {}
        )
        if not found:
            if verdict.state != TrialState.COMPLETE:
                return verdict, {}
            got = {name: outcome.metrics.get(name) for name in names}
            return Verdict(TrialState.FAIL, (), f"trainer did not return a finite value for each constraint: {got}"), {}
        for name, value in found.items():
            running.trial.set_constraint(name, value)
        return verdict, found

    def _record_outcome(self, running: RunningTrial, outcome: Outcome) -> None:
        """What the outcome says; a run that never sent one (its worker killed or lost) gets where and when it
        started from its ``Started`` event, and its end from the controller's clock."""
        outcome = _with_run_times(running, outcome)
        fields: dict[str, object] = {}
        if outcome.worker:
            fields.update(worker=outcome.worker, host=outcome.host)
        if outcome.started is not None:
            fields.update(devices=list(outcome.devices), started=outcome.started)
        if outcome.finished is not None:
            fields.update(finished=outcome.finished)
        if outcome.duration is not None:
            fields.update(duration=outcome.duration)
        if outcome.error_type:  # the trainer raised: its exception's class, so no one parses the reason for it
            fields.update(error_type=outcome.error_type)
        if outcome.ranks:  # a trial spanning several workers: each rank's own timings
            fields.update(ranks=[dict(r) for r in outcome.ranks])
        if running.stop_reason and outcome.finished is not None:
            # report sent -> trial stopped: how long a stop decision takes to take effect
            fields.update(
                stop_latency=outcome.finished - running.stop_trigger_time, stop_requested_at=running.stop_requested_at
            )
        fields.update(device_fields(outcome))
        metrics = encode_metrics(outcome.metrics)
        fields.update({size: metrics[size] for size in MODEL_SIZE_ATTRS if size in metrics})  # where measured
        history, times = encode_history(running.reports), [at for _step, _metrics, at in running.reports]
        write_attrs(running.trial, **fields, metrics=metrics, history=history, report_times=times)

    def _write_failure_log(self, running: RunningTrial, outcome: Outcome, reason: str) -> None:
        text = outcome.traceback or reason
        write_attrs(running.trial, traceback=text[-MAX_TRACEBACK:])
        path = self._folder.trial_error_log(running.number)
        path.parent.mkdir(parents=True, exist_ok=True)  # a trial lost before it started has no folder yet
        path.write_text(f"trial {running.number} failed: {reason}\n\n{text}\n")

    def _mark_told(self, number: int) -> None:
        self._told.add(number)
        while self._next_to_tell in self._told:
            self._next_to_tell += 1

    def _track_best(self, values: list[float] | None) -> None:
        if self._spec.study.multi_objective or not values:
            return
        value = float(values[0])
        better = max if maximizing(self._spec.objective_directions[0]) else min
        self.best = value if self.best is None else better(self.best, value)


def named_values(outcome: Outcome, metrics: tuple[str, ...]) -> Outcome:
    """A trainer that returned a number, or a tuple of them, as an Optuna objective does: those values as the study's
    ``[study] metric(s)``, one per objective in order (another count: a failed trial that says so)."""
    if not outcome.values:
        return outcome
    values = outcome.values
    if len(values) != len(metrics):
        error = f"the trainer returned {len(values)} value(s) for {len(metrics)} objective(s) ({', '.join(metrics)})"
        return dataclasses.replace(outcome, status=ERROR, error=error, error_type="ValueError", values=())
    return dataclasses.replace(outcome, metrics={**outcome.metrics, **dict(zip(metrics, values))}, values=())


def _with_run_times(running: RunningTrial, outcome: Outcome) -> Outcome:
    """``outcome`` with the worker and start of ``running``'s last run where it has none, and an end (now)."""
    if outcome.started is not None or running.started_at is None:
        return outcome
    worker = outcome.worker or running.worker
    finished = outcome.finished if outcome.finished is not None else time.time()
    return dataclasses.replace(outcome, worker=worker, started=running.started_at, finished=finished)


def _finite(metrics: Mapping[str, float], names: tuple[str, ...]) -> dict[str, float]:
    """Each of ``names`` from ``metrics`` as a float, or {} unless every one is there and finite."""
    values = {name: metrics.get(name) for name in names}
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values.values()):
        return {name: float(v) for name, v in values.items()}  # type: ignore[arg-type]
    return {}


def _failure_reason(outcome: Outcome) -> str:
    error = outcome.error or "unknown error"
    if outcome.status == LOST:
        return f"worker lost ({error}); retries spent"
    if outcome.status == CANCELLED:
        return f"cancelled: {error}"
    return error
