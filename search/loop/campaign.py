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
  its next segment: a resize, a PBT member's next interval; a verdict), as typed transitions
  between a trial's segments (:mod:`search.loop.segments`);
- :class:`~search.loop.intermediate.IntermediateValues`: reports into ``metrics.jsonl`` and the study;
- :class:`~search.loop.ledger.Ledger`: tells the study, counts, keeps the best;
- :class:`~search.loop.budget.Budget`: trials left to ask, time left to start them.

The campaign alone moves a trial between them (supply -> dispatcher -> ledger, a trial's next
segment, and a PBT member's park and release) and applies what the policies decide; no part calls
back into it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable

import optuna

from cluster.executor import Finished, Outcome, Query, Report, Started, TrialExecutor
from search.compat import optuna_private as op
from search.loop.barrier import Barrier, Expire
from search.loop.budget import Budget
from search.loop.cost_gates import CostGates
from search.loop.costs import TrialCosts
from search.loop.dispatch import CampaignError, Dispatcher
from search.loop.elastic import elastic_policies
from search.loop.eta import Eta
from search.loop.fail_fast import early_failures_error
from search.loop.hooks import CampaignHooks
from search.loop.idle_slots import widen_idle
from search.loop.intermediate import IntermediateValues
from search.loop.later_segments import rung_factor
from search.loop.ledger import NEVER_STARTED, Ledger, named_values
from search.loop.next_runs import NextRuns
from search.loop.policies import (
    TARGET_REACHED,
    Halt,
    NextSegment,
    Park,
    Resubmit,
    Verdict,
    decide,
    first_segments,
    first_stop,
    policies_for,
    population_of,
)
from search.loop.queries import answer
from search.loop.segment_records import record_run
from search.loop.segments import Segment, Stop
from search.loop.slot_watch import SlotWatch
from search.loop.stops import decide_stop, settle_decided
from search.loop.supply import TrialSupply
from search.loop.trials import Prepared, RunningTrial
from search.sampling.samplers import reads_cost
from search.spec.campaign_spec import CampaignSpec
from search.store.folder import CampaignFolder
from search.store.heap import SurvivorFreezer
from search.store.records import Files, TrialRecord, write_attrs
from search.store.sinks import ReportSinks
from search.store.storage import flusher
from search.vocab.terms import StopReason, Transition
from trainers.api import TrialConfig

__all__ = ["Campaign", "CampaignError", "Snapshot", "RunningTrial", "NEVER_STARTED", "TARGET_REACHED"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What the progress display shows."""

    complete: int
    pruned: int
    failed: int
    running: int  # started on a worker
    budget: int
    best: float | None
    elapsed: float
    queued: int = 0  # sent to the cluster, not started yet (waiting for a slot or a worker)
    eta: Eta | None = None  # the expected end, from the trial model (None: not known yet)


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
        on_notice: Callable[[str], None] | None = None,
    ) -> None:
        self.spec = spec
        self.folder = folder
        self.study = study
        self.executor = executor
        self._on_progress = on_progress or (lambda _s: None)
        self._poll = poll_interval
        # group commit: this iteration's writes, out of the process
        self._flush = flush or flusher(op.storage_of(study))
        self._sync = flush or flusher(op.storage_of(study), sync=True)  # and on disk: before a decision is acted on
        self.hooks = hooks or CampaignHooks()  # the user's callbacks and report hook; they may stop the campaign
        self.budget = Budget(  # clock: wall-clock seconds; a simulated executor passes its virtual clock
            spec.study.n_trials, spec.study.time_budget, clock, self.hooks
        )
        population = population_of(spec, folder, study)
        self.sinks = ReportSinks.for_campaign(spec.logging, folder, spec.study.name)  # closed when run() ends
        self.sinks.add(self.hooks.sink(study))
        self.ledger = Ledger(spec, study, folder, sinks=self.sinks)
        self.reports = IntermediateValues(spec.study, spec.pruning, study, folder, sinks=self.sinks)
        extra = (
            *self.hooks.policies,
            *elastic_policies(spec.elastic, spec.pruning, spec.trainer.epochs, spec.study.pruner, spec.study.n_trials),
        )  # [elastic]: before pruning, after the faults
        self.policies = policies_for(spec, folder, population, self.reports, extra)
        self.costs = TrialCosts(
            records=reads_cost(spec.study.sampler), reduction_factor=rung_factor(spec.study, spec.pruning)
        )
        executor.predict_with(self.costs)  # the one model: the executor's walltime check and packing read it too
        self.dispatch = Dispatcher(spec, executor, clock, self.costs, restore=self.reports.restore)
        self.supply = TrialSupply(
            spec, folder, study, executor, self.ledger, self.budget, population, self._outside_supply, sampling
        )
        self.barrier = Barrier(population, self.sinks, self.policies) if population else None
        self._freezer = SurvivorFreezer()  # what the loop keeps leaves the collector's walks (an owned heap only)
        # too few slots: a line (on_notice: the terminal; campaign.log too); none for worker_timeout: exit 3
        self._notice = on_notice or (lambda _line: None)
        self._slot_watch = SlotWatch(spec.cluster.worker_timeout, self._notice, clock)
        self._widest = max(spec.widths())
        self._clock = clock
        self.gates = CostGates(spec.study, self.costs, self.budget, folder.root / Files.ETA_LOG, self._notice)
        self.budget.gate = self.gates.may_start_more  # [study] slot_hours / gpu_hours, placement in a time budget
        # a trial's next segment or retry: through the same gates, else held (resumable)
        self.next_runs = NextRuns(self.dispatch, self.gates, self.barrier, self.policies, self._sync, self._notice)

    # --- the loop ------------------------------------------------------------------------

    def run(self) -> None:
        """Run until the budget is spent and every trial is told; Ctrl-C leaves trials resumable."""
        trials = self.study.get_trials(deepcopy=False)
        resumable = self.ledger.load(trials)
        self.costs.load(TrialRecord.of(t) for t in trials if t.state.is_finished())  # a resume's spent and model
        resumable = settle_decided(resumable, self.study, self.reports, self.ledger)  # stopped before a kill
        self.ledger.flush(self._all_asked())
        self.dispatch.check_capacity()
        self.gates.open(self.study, self.executor.slots(), self.spec.trainer.gpus)
        try:
            self.supply.start(resumable)
            while True:
                self.dispatch.request_stops(self.gates.look(self.dispatch.running.values(), self._clock()))
                self._fill()
                widen_idle(self.policies, self.dispatch, self.supply, self.budget.may_start())  # grow = "goodput"
                self.executor.want(self.dispatch.wanted(self.supply, self.budget.may_start()))
                self.ledger.flush(self._all_asked())  # deterministic: the budget may be fully asked now
                self.supply.flush_params()  # of the trials the journal is about to record
                self._flush()
                if not self.dispatch.running and not self.supply.more_coming(self.budget.may_start()):
                    break
                for event in self.executor.events(timeout=self._poll):
                    self._handle(event)
                self._stop_if_failing()
                if self.barrier is not None:
                    self._step_population()
                self.dispatch.enforce_time_limits(campaign_over=not self.budget.time_left())
                self._watch_slots()
                self._on_progress(self.snapshot())
                self._freezer.tick()
        except BaseException:
            self.supply.close(timeout=5.0)  # a resumed campaign seeds a sampler of its own: no long wait for this one
            self._mark_interrupted()
            raise
        else:
            self.supply.close()
            self._release_unstarted()
        finally:
            try:
                self._sync()  # may fail too when the disk is full; the executor is closed all the same
            finally:
                self.executor.close()  # never raises (a lost scheduler is logged)
                self.sinks.close()
                self._freezer.release()
        self._on_progress(self.snapshot())

    def _fill(self) -> None:
        """Move asked trials from the supply to the dispatcher while there is room and trials may start."""
        plan = self.dispatch.plan(self.supply.ask_seconds())
        while self.budget.may_start():
            free, slot_free = self.dispatch.free_tasks(plan), self.dispatch.slot_free(plan)
            self.supply.want(free, plan.batch, plan.spare, slot_free, True)
            if not self.dispatch.has_room(plan):
                return  # no room, not even in the queue: ask nothing, so the next trial sees the latest results
            group = self._next_group(plan.batch, *self.gates.choice(self.dispatch.free_tasks(plan)))
            if not group:
                return
            # sampling may outlast the time budget; a child process may still be sending this batch
            on_its_way = self.supply.batch_on_its_way(group, plan.batch)
            if not self.budget.may_start() or not self.dispatch.fits(group, plan) or on_its_way:
                self.supply.put_back(group)
                return
            behind = () if self.dispatch.slot_free(plan) else self.dispatch.running.values()
            if not self.gates.fits(group, behind, self._clock()):  # predicted past the time budget
                self.supply.put_back(group)
                return
            self.dispatch.launch(first_segments(self.policies, group), plan)
            self.gates.took(group)
        self.supply.want(0, plan.batch, 0, self.dispatch.slot_free(plan), False)

    def _next_group(
        self, batch: int, choose_from: int = 0, order: Callable[[deque[Prepared]], None] | None = None
    ) -> list[Prepared]:
        """Up to ``batch`` trials of one width from the supply; one whose parameters cannot run is told FAIL now.
        With ``order``, chosen by it among ``choose_from`` trials asked (the placement's longest first)."""
        while self.supply.short_of(max(batch, choose_from)) and (item := self.supply.fetch()) is not None:
            if item.invalid:
                self.ledger.reject(item.trial, item.invalid)  # e.g. a genome over the parameter limit
        if order is not None:
            order(self.supply.pending)
        return self.supply.group(batch)

    def _watch_slots(self) -> None:
        """Too few slots for the trials in flight: said, and bounded (:mod:`search.loop.slot_watch`)."""
        slots = self.executor.slots()
        if slots.total >= self._widest:  # enough for any trial: no scan of the running ones
            self._slot_watch.check(slots, None)
        else:
            self._slot_watch.check(slots, self.dispatch.in_flight(self.supply.pending))

    def _step_population(self) -> None:
        """PBT: members of a decided rung go on; past the time budget the waiting ones are told PRUNED."""
        assert self.barrier is not None
        for move in self.barrier.step(self.budget.time_left(), lambda: self.dispatch.room(1, self.supply, False)):
            if isinstance(move, Expire):
                self.dispatch.forget(move.running.number)
                self._finish(move.running, move.outcome, move.verdict)
            else:
                self._next_segment(move.running, move.config, move.segment)  # parked: it holds no slot, leaves none

    def _finish(self, running: RunningTrial, outcome: Outcome, verdict: Verdict | None) -> None:
        self.ledger.finish(running, outcome, verdict)
        self.ledger.flush(self._all_asked())  # deterministic: told in number order, as far as it may now

    def _handle(self, event: Started | Report | Finished | Query) -> None:
        if isinstance(event, Report):
            self._on_report(event)
        elif isinstance(event, Query):
            self._on_query(event)
        elif isinstance(event, Started):
            self.dispatch.started(event)
        else:
            self._on_finished(event)

    def _on_report(self, report: Report) -> None:
        running = self.dispatch.running.get(report.number)
        if running is None:
            return  # a late report of a trial already told; its history came with the outcome
        self.reports.record(running, report.step, report.metrics, report.time, report.worker)
        self.costs.reported(running, report.time, report.metrics)
        if running.stop_reason and running.stop_transition is not Transition.RESIZE:  # a resize may still be pruned
            return
        stop = first_stop(self.policies, running.view(), report.metrics)
        if stop is not None:
            decide_stop(running, stop, self._sync)  # a prune: durable before it is acted on, a resume keeps it
            self.dispatch.request_stop(running, stop, report.time)

    def _on_query(self, query: Query) -> None:
        """A define-by-run trial asks (a suggestion, whether it is pruned): answered now, what it wrote flushed first."""
        running = self.dispatch.running.get(query.number)
        if running is None:
            query.reply({"error": f"trial {query.number} is not running on this controller"})
            return
        result = answer(running.trial, running.pruned_reason, query.question)
        if result.pruned:  # it raised TrialPruned itself
            decide_stop(running, Stop(StopReason.PRUNED), self._sync)
            self.dispatch.request_stop(running, Stop(StopReason.PRUNED), query.time)
        self._flush()
        query.reply(result.reply)

    def _on_finished(self, event: Finished) -> None:
        outcome = named_values(event.outcome, self.spec.study.metrics)  # a number returned: the study's metric
        running = self.dispatch.ended(event.number)
        if running is None:
            return
        self.costs.ended(running, outcome)
        self.reports.replay(running, outcome.history)
        record_run(running, outcome, population=self.barrier is not None)
        if self.barrier is not None:
            outcome = self.barrier.ran(running, outcome)  # a member's whole time, from its first segment
        ruling = decide(self.policies, running.view(), outcome)
        if ruling.attrs:
            write_attrs(running.trial, **ruling.attrs)
        for name, value in ruling.constraints.items():
            running.trial.set_constraint(name, value)
        decision = ruling.decision
        if isinstance(decision, Halt):
            raise CampaignError(decision.reason)  # the trial stays in flight: marked interrupted, resumable
        if isinstance(decision, Park) and self.barrier is not None:
            self.next_runs.park(running, decision.outcome)  # it keeps its place in the campaign, not its slot
            return
        if isinstance(decision, Resubmit):
            self.next_runs.retry(running, decision)  # narrower where [elastic] allows it and a worker was lost
            return
        if isinstance(decision, NextSegment):  # its run ended just now: it leaves its slots to its next segment
            self._next_segment(running, decision.config, decision.segment, running.width)
            return
        self.dispatch.forget(event.number)
        self._finish(running, outcome, decision if isinstance(decision, Verdict) else None)

    def _next_segment(self, running: RunningTrial, config: TrialConfig, segment: Segment, leaving: int = 0) -> None:
        """A trial's next segment, recorded, then sent at its width, or held; ``leaving``: the slots its run held."""
        room = self.dispatch.room(segment.width, self.supply, self.budget.may_start(), leaving)
        self.next_runs.segment(running, config, segment, room)

    def _stop_if_failing(self) -> None:
        """``[study] fail_fast``: the first trials all failed one way: stop before the rest of the budget is spent
        (trials in flight stay resumable). Nothing left to start or finish: the campaign ends as it would."""
        if self.ledger.fail_fast.tripped is None:
            return
        in_flight = len(self.dispatch.running) + self.supply.in_hand()  # running, or asked and not yet started
        not_started = self.supply.trials_left()
        if not in_flight and not not_started:
            return
        raise early_failures_error(self.ledger.fail_fast, self.folder.root, self.spec.source, not_started, in_flight)

    # --- budget ------------------------------------------------------------------------------

    def _all_asked(self) -> bool:
        """The whole budget is asked: no trial left to ask, none asked waiting for a slot."""
        return self.supply.trials_left() == 0 and not self.supply.pending

    def _outside_supply(self) -> int:
        """Trials of the budget past the supply: told, finished and waiting to be told, launched, or held."""
        return self.ledger.finished + len(self.ledger.waiting) + len(self.dispatch.running) + len(self.next_runs.held)

    def _release_unstarted(self) -> None:
        """Trials asked but never launched (the time budget ran out first) end PRUNED; none stays RUNNING."""
        for prepared in self.supply.unstarted():
            if prepared.invalid:
                self.ledger.reject(prepared.trial, prepared.invalid)
            else:
                self.ledger.never_started(prepared.trial)

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
        started = sum(1 for r in self.dispatch.running.values() if r.started_at is not None)
        return Snapshot(
            complete=counts["complete"],
            pruned=counts["pruned"],
            failed=counts["failed"],
            running=started,
            budget=self.spec.study.n_trials,
            best=self.ledger.best,
            elapsed=self.budget.elapsed(),
            queued=len(self.dispatch.running) - started,
            eta=self.eta(),
        )

    def eta(self) -> Eta | None:
        """The campaign's expected end from the trial model (:class:`~search.loop.cost_gates.CostGates`)."""
        running = list(self.dispatch.running.values())
        to_start = self.supply.trials_left() + len(self.supply.pending)
        now, left, done = self._clock(), self.budget.seconds_left(), self.ledger.finished
        return self.gates.eta(running, to_start, self.executor.slots().total, now, left, done)
