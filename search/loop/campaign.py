"""The campaign loop: fill slots -> collect events -> decide -> tell, until the budget is spent.

The controller is the only writer of the study. It keeps every slot of the cluster
busy: as soon as a trial ends, its slot is refilled. Reports stream in while trials
run; each becomes an Optuna intermediate value, and the policies (pruning, a scaling
target) may answer with a stop request that the trial sees at its next report.
Nothing here blocks a worker: a trial only ever waits on its own training.

The loop's parts, each in its own module:

- :class:`~search.loop.supply.TrialSupply`: where trials come from (resumed ones, then the sampler's);
- :class:`~search.loop.dispatch.Dispatcher`: slots, tasks, pipeline depth, placement;
- :mod:`search.loop.policies`: what stops a trial early, what a finished one becomes (retry,
  next PBT segment, a verdict);
- :class:`~search.loop.intermediate.IntermediateValues`: reports into ``metrics.jsonl`` and the study;
- :class:`~search.loop.ledger.Ledger`: tells the study, counts, keeps the best.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

import optuna

from cluster.executor import Finished, Report, Started, TrialExecutor

from search.loop.dispatch import CampaignError, Dispatcher
from search.loop.hooks import CampaignHooks
from search.loop.intermediate import IntermediateValues
from search.loop.ledger import NEVER_STARTED, Ledger
from search.loop.barrier import Barrier
from search.loop.policies import (
    TARGET_REACHED, Halt, Park, Resubmit, Verdict, first_decision, first_stop_reason, policies_for, population_of,
)
from search.spec.campaign_spec import CampaignSpec
from search.store.folder import CampaignFolder
from search.store.records import write_attrs
from search.store.sinks import ReportSinks
from search.store.storage import flusher
from search.loop.stops import decide_stop, settle_decided
from search.loop.supply import TrialSupply
from search.loop.trials import RunningTrial

__all__ = ["Campaign", "CampaignError", "Snapshot", "RunningTrial", "NEVER_STARTED", "TARGET_REACHED"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What the progress display shows."""

    complete: int
    pruned: int
    failed: int
    running: int
    budget: int
    best: float | None
    elapsed: float


class Campaign:
    """Drives one study to its trial budget (or time budget) on an executor."""

    def __init__(
        self,
        spec: CampaignSpec,
        folder: CampaignFolder,
        study: optuna.Study,
        executor: TrialExecutor,
        on_progress: Callable[[Snapshot], None] | None = None,
        poll_interval: float = 0.25,
        clock: Callable[[], float] = time.time,
        flush: Callable[[], object] | None = None,
        sampling: str | None = None,
        hooks: CampaignHooks | None = None,
    ) -> None:
        self.spec = spec
        self.folder = folder
        self.study = study
        self.executor = executor
        self._on_progress = on_progress or (lambda _s: None)
        self._poll = poll_interval
        self._clock = clock  # wall-clock seconds; a simulated executor passes its virtual clock
        self._flush = flush or flusher(study._storage)  # group commit: this iteration's writes, durable
        self._started = clock()
        population = population_of(spec, folder, study)
        self.sinks = ReportSinks.for_campaign(spec.logging, folder, spec.study.name)  # closed when run() ends
        self.hooks = hooks or CampaignHooks()  # the user's callbacks and report hook; they may stop the campaign
        self.sinks.add(self.hooks.sink(study))
        self.ledger = Ledger(spec, study, folder, all_asked=self._all_asked, sinks=self.sinks)
        self.reports = IntermediateValues(spec, study, folder, sinks=self.sinks)
        self.policies = policies_for(spec, folder, population, self.reports)
        self.dispatch = Dispatcher(spec, folder, executor, clock)
        self.supply = TrialSupply(spec, folder, study, executor, self.ledger, self._budget_left, population, sampling)
        self.barrier = Barrier(population, self.dispatch, self.ledger, self.sinks) if population else None

    # --- the loop ------------------------------------------------------------------------

    def run(self) -> None:
        """Run until the budget is spent and every trial is told; Ctrl-C leaves trials resumable."""
        resumable = self.ledger.load(self.study.get_trials(deepcopy=False))
        resumable = settle_decided(resumable, self.study, self.reports, self.ledger)  # stopped before a kill
        self.dispatch.check_capacity()
        try:
            self.supply.start(resumable)
            while True:
                self.dispatch.fill(self.supply, self._may_start)
                self.ledger.flush()  # deterministic: the budget may be fully asked now
                self._flush()
                if not self.dispatch.running and not self.supply.more_coming(self._may_start()):
                    break
                for event in self.executor.events(timeout=self._poll):
                    self._handle(event)
                if self.barrier is not None:
                    self.barrier.step(self._time_left())  # PBT: members of a decided rung go on
                self.dispatch.enforce_time_limits(campaign_over=not self._time_left())
                self._on_progress(self.snapshot())
        except BaseException:
            self.supply.close()
            self._mark_interrupted()
            raise
        else:
            self.supply.close()
            self.supply.release_unstarted()
        finally:
            try:
                self._flush()  # may fail too when the disk is full; the executor is closed all the same
            finally:
                self.executor.close()  # never raises (a lost scheduler is logged)
                self.sinks.close()
        self._on_progress(self.snapshot())

    def _handle(self, event: Started | Report | Finished) -> None:
        if isinstance(event, Report):
            self._on_report(event)
        elif isinstance(event, Started):
            self.dispatch.started(event)
        else:
            self._on_finished(event)

    def _on_report(self, report: Report) -> None:
        running = self.dispatch.running.get(report.number)
        if running is None:
            return  # a late report of a trial already told; its history came with the outcome
        self.reports.record(running, report.step, report.metrics, report.time, report.worker)
        if running.stop_reason:
            return
        reason = first_stop_reason(self.policies, running, report.metrics)
        if reason:
            decide_stop(running, reason, self._flush)  # durable before it is acted on: a resume keeps it
            self.dispatch.request_stop(running, reason, report.time)

    def _on_finished(self, event: Finished) -> None:
        outcome = event.outcome
        running = self.dispatch.ended(event.number, outcome.duration)
        if running is None:
            return
        self.reports.replay(running, outcome.history)
        if self.barrier is not None:
            outcome = self.barrier.ran(running, outcome)  # a member's whole time, from its first segment
        decision = first_decision(self.policies, running, outcome)
        if isinstance(decision, Halt):
            raise CampaignError(decision.reason)  # the trial stays in flight: marked interrupted, resumable
        if isinstance(decision, Park) and self.barrier is not None:
            self.barrier.park(running, decision.outcome)  # it keeps its place in the campaign, not its slot
            return
        if isinstance(decision, Resubmit):
            self.dispatch.resubmit(running, decision.config)
            return
        self.dispatch.forget(event.number)
        self.ledger.finish(running, outcome, decision if isinstance(decision, Verdict) else None)

    # --- budget ------------------------------------------------------------------------------

    def _budget_left(self) -> int:
        """Trials not asked yet (asked ones in hand, queued, running or waiting to be told count as spent)."""
        if self.hooks.stopped:
            return 0
        in_hand = len(self.dispatch.running) + len(self.ledger.waiting) + self.supply.in_hand()
        return max(0, self.spec.study.n_trials - self.ledger.finished - in_hand)

    def _all_asked(self) -> bool:
        return self._budget_left() == 0 and not self.supply.pending

    def _time_left(self) -> bool:
        budget = self.spec.study.time_budget
        return budget <= 0 or self._clock() - self._started < budget

    def _may_start(self) -> bool:
        """New trials may start: time is left and no hook stopped the campaign (running ones finish either way)."""
        return self._time_left() and not self.hooks.stopped

    def _mark_interrupted(self) -> None:
        """Leave unfinished trials RUNNING (resumable, same number and params) and say so."""
        trials = [r.trial for r in self.dispatch.running.values()]
        trials += [r.trial for r, _o, _v in self.ledger.waiting.values()] + [p.trial for p in self.supply.pending]
        for trial in trials:
            try:
                write_attrs(trial, interrupted=True)
            except Exception as exc:  # noqa: BLE001 - storage may be gone too; resume still finds RUNNING
                log.warning("could not mark trial %d interrupted: %s", trial.number, exc)

    # --- progress ------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        counts = self.ledger.counts
        return Snapshot(
            complete=counts["complete"],
            pruned=counts["pruned"],
            failed=counts["failed"],
            running=len(self.dispatch.running),
            budget=self.spec.study.n_trials,
            best=self.ledger.best,
            elapsed=self._clock() - self._started,
        )
