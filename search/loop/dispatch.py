"""Dispatch: which trials go out, when, where and how many per task.

The dispatcher owns the cluster's slots as the controller sees them: the trials
running (:class:`~search.loop.trials.RunningTrial`), the tasks they run in (a batch of
short trials is one task holding its slots until all are done), how deep the queue
at the workers is (:class:`~search.loop.pipeline.Pipeline`) and, with a short queue,
which worker a queued task waits at. It never takes trials itself: the campaign moves them
from the supply to :meth:`Dispatcher.launch` within the room a :class:`FillPlan` gives.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from cluster.errors import ClusterError
from cluster.executor import Started, TrialExecutor, TrialRequest
from search.loop.costs import DURATION_WINDOW, TrialCosts
from search.loop.pipeline import Pipeline
from search.loop.segments import Stop, resume_epoch
from search.loop.slot_watch import Waiting
from search.loop.trials import Prepared, RunningTrial
from search.spec.campaign_spec import CampaignSpec
from search.store.records import Attr, write_attrs
from search.vocab.terms import StopReason
from spaces.errors import HypersweepError
from trainers.api import TrialConfig

if TYPE_CHECKING:
    from search.loop.supply import TrialSupply

__all__ = [
    "Dispatcher",
    "FillPlan",
    "Room",
    "CampaignError",
    "DURATION_WINDOW",
    "TIME_BUDGET",
    "TRIAL_TIMEOUT",
    "TIME_LIMITS",
]

TIME_BUDGET = StopReason.TIME_BUDGET
TRIAL_TIMEOUT = StopReason.TRIAL_TIMEOUT
TIME_LIMITS = (TIME_BUDGET, TRIAL_TIMEOUT)  # stop reasons that end in a kill when not answered
TIME_CHECK_INTERVAL = 1.0  # clock seconds between two looks for trials past a time limit

log = logging.getLogger(__name__)


class CampaignError(HypersweepError, RuntimeError):
    """The campaign cannot go on (a message for the user, one line; exit status 1)."""


@dataclasses.dataclass(frozen=True)
class FillPlan:
    """One round of filling slots: the cluster's ``slots``, trials per task (``batch``), the slots launched
    tasks may hold (``capacity``: free slots plus the queue at the workers), whether a queued task is placed
    at a worker (``place``) and how many spare trials a background sampler keeps ready (``spare``)."""

    slots: int
    batch: int
    capacity: int
    place: bool
    spare: int


@dataclasses.dataclass(frozen=True)
class Room:
    """For a trial's next segment: whether its width fits the workers together (``fits``), the ``free`` slots (its
    own included; those of tasks queued at the workers too) and the slots the trials that wait (queued, asked, or
    still to be asked) want (``waiting``)."""

    fits: bool
    free: int
    waiting: int


class Dispatcher:
    """Keeps every slot busy: launches trials from the supply while slots (and the queue) allow."""

    def __init__(
        self,
        spec: CampaignSpec,
        executor: TrialExecutor,
        clock: Callable[[], float],
        costs: TrialCosts | None = None,
        restore: Callable[[RunningTrial], None] | None = None,
    ) -> None:
        self._spec = spec
        self._costs = costs or TrialCosts()  # the trial model: the typical run sets the queue depth
        self._executor = executor
        self._clock = clock
        fixed = spec.study.deterministic or spec.pbt is not None
        self._pipeline = Pipeline(spec.study.dispatch_ahead, spec.study.batch_trials, fixed=fixed)
        self.running: dict[int, RunningTrial] = {}
        self._min_width = min(spec.widths())
        self._busy = 0  # slots held by launched tasks
        self._task_seq = 0
        self._tasks: dict[int, list[int]] = {}  # task -> [width, trials still in it]
        self._claimed: set[int] = set()  # running tasks a queued task waits to follow on their worker
        self._place = not executor.virtual_time
        self._limits_checked_at = -math.inf  # when enforce_time_limits last looked at every running trial
        self._over_seen = False  # whether it has seen the time budget run out
        self.held_back: Callable[[], int] = lambda: 0  # slots promised to a trial's resize: no new trial takes them
        # a resumed trial's earlier reports read back (the campaign's IntermediateValues.restore): where it resumes
        self._restore = restore or (lambda _running: None)

    def check_capacity(self) -> None:
        """Refuse a cluster whose workers declare no slots, or too few for the widest trial. A cluster with no worker
        yet (restarting, joining) is waited for: the campaign's :class:`~search.loop.slot_watch.SlotWatch` bounds it."""
        slots = self._executor.slots()
        if slots.total < 1 and slots.workers:
            raise ClusterError(
                f"the cluster's {slots.workers} worker(s) declare no {slots.resource} slots (Dask's own 'dask worker' "
                f"without --resources?): start them with 'dask worker ... --resources {slots.resource}=n', "
                "or with 'hypersweep worker', which declares them"
            )
        width = max(self._spec.widths())
        if 0 < slots.total < width:  # wider than one worker is fine: it spans several (cluster.span)
            raise CampaignError(
                f"a trial may need {width} {slots.resource} slots (data_parallel) "
                f"but the cluster's {slots.workers} worker(s) have {slots.total} in all; add workers or slots, "
                "or lower data_parallel"
            )

    # --- filling slots ------------------------------------------------------------------------------

    def plan(self, ask_seconds: float) -> FillPlan:
        """This round's room: tasks launch while there are free slots, plus ``ahead`` tasks queued at the workers.

        A free slot gets whatever is asked (a partial batch); the queue beyond the
        free slots gets full batches only (:meth:`fits`).
        """
        slots = self._executor.slots().total
        batch = self._batch_size(ask_seconds)
        ahead = self._pipeline.ahead(slots, self._median_duration(), batch)
        capacity = slots + ahead * self._min_width
        place = ahead < slots  # a short queue: which worker a queued task waits at matters
        spare = self._pipeline.spare(slots, self._median_duration(), ask_seconds)
        return FillPlan(slots, batch, capacity, place, spare)

    def free_tasks(self, plan: FillPlan) -> int:
        """Tasks of the narrowest width that still fit in the plan's capacity."""
        return max(0, self._capacity(plan) - self._taken()) // max(1, self._min_width)

    def slot_free(self, plan: FillPlan) -> bool:
        return self._taken() < plan.slots

    def has_room(self, plan: FillPlan) -> bool:
        """Room for one more task, at least in the queue (with nothing running there always is)."""
        return not self.running or self._taken() + self._min_width <= self._capacity(plan)

    def fits(self, group: list[Prepared], plan: FillPlan) -> bool:
        """Whether ``group`` may launch now: into free slots, or as a full batch into the queue."""
        width, taken = group[0].width, self._taken()
        fits = taken + width <= plan.slots or (taken + width <= self._capacity(plan) and len(group) == plan.batch)
        return not self.running or fits

    def _capacity(self, plan: FillPlan) -> int:
        """The plan's capacity; no queue beyond the slots while some are held back (a queued task would take them)."""
        return plan.slots if self.held_back() else plan.capacity

    def _taken(self) -> int:
        """The slots launched tasks hold and those held back for a trial's resize."""
        return self._busy + self.held_back()

    def launch(self, group: list[Prepared], plan: FillPlan) -> None:
        """Send ``group`` as one task; one that will queue waits behind the oldest running task (placement)."""
        width = group[0].width
        self._launch(group, self._preferred_worker(width) if plan.place and self._busy + width > plan.slots else "")

    def _batch_size(self, ask_seconds: float) -> int:
        if not self._executor.supports_batch:
            return 1
        return self._pipeline.batch(self._median_duration(), ask_seconds)

    def _median_duration(self) -> float | None:
        return self._costs.typical_run()

    def _launch(self, group: list[Prepared], prefer: str = "") -> None:
        """Send trials of one width to the executor as one task (a batch when there are several)."""
        members = []
        for prepared in group:
            trial, config = prepared.trial, prepared.config
            assert config is not None, "invalid trials are told FAIL before dispatch"  # its folder made at its ask
            batch: dict[str, object] = {"batch": len(group)} if len(group) > 1 else {}
            if not prepared.fresh:  # a held trial goes on: held no more
                batch[Attr.HELD] = ""
            write_attrs(
                trial,
                seed=config.seed,
                config=config.to_dict(),
                width=prepared.width,
                sampler_saw=prepared.sampler_saw,
                **batch,
            )  # one journal append
            # a fresh trial has no earlier controller's reports to read back from its folder
            running = RunningTrial(
                trial, config, prepared.width, self._clock(), restored=prepared.fresh, segments=list(prepared.segments)
            )
            self.running[trial.number] = running
            if not prepared.fresh:  # a resumed campaign's trial: its checkpoint's epoch is in its earlier reports
                self._restore(running)
            running.sent_from(_resumes_at(running))
            members.append(running)
        self._new_task(members)
        entry = self._spec.trainer.entry
        requests = [TrialRequest(r.number, entry, r.config, r.width, prefer, r.start_epoch) for r in members]
        if len(requests) == 1:
            self._executor.submit(requests[0])
        else:
            self._executor.submit_batch(requests)  # type: ignore[attr-defined]  # only when supports_batch

    def resubmit(self, running: RunningTrial, config: TrialConfig) -> None:
        """The same trial again, on its own, at its width (a retry; a next segment, begun by the campaign)."""
        running.rerun(config)  # a new run: its own Started event will come
        write_attrs(running.trial, config=config.to_dict())  # a PBT member's current params and segment
        self._new_task([running])
        running.sent_from(_resumes_at(running))
        request = TrialRequest(running.number, self._spec.trainer.entry, config, running.width, "", running.start_epoch)
        self._executor.submit(request)

    # --- tasks and placement ------------------------------------------------------------------------

    def _new_task(self, members: list[RunningTrial]) -> None:
        """The trials (one width) the executor runs as one task; it holds its slots until all are done."""
        self._task_seq += 1
        self._tasks[self._task_seq] = [members[0].width, len(members)]
        self._busy += members[0].width
        for running in members:
            running.in_task(self._task_seq)

    def _leave_task(self, running: RunningTrial) -> None:
        task = self._tasks.get(running.task)
        if task is None:
            return
        task[1] -= 1
        if task[1] <= 0:
            self._busy -= task[0]
            del self._tasks[running.task]
            self._claimed.discard(running.task)
        running.in_task(0)

    def _preferred_worker(self, width: int) -> str:
        """For a task that will queue: the worker of the oldest running task no queued task follows yet.

        Used when fewer tasks are queued than there are slots. Left to itself Dask
        may queue one behind a trial that ends later, and an idle worker then waits
        for work stealing (about a second). With a task queued per slot, Dask's own
        balancing does better.
        """
        if width != 1 or not self._place:
            return ""
        oldest: RunningTrial | None = None
        for r in self.running.values():
            if r.started_at is None or not r.worker or r.task in self._claimed or r.width != 1:
                continue
            if oldest is None or r.started_at < oldest.started_at:  # type: ignore[operator]
                oldest = r
        if oldest is None:
            return ""
        self._claimed.add(oldest.task)
        return oldest.worker

    def wanted(self, supply: TrialSupply, may_start: bool) -> int:
        """The slots the campaign could use now: those its launched trials hold, and one for each trial that waits
        or may still be asked (widened to the narrowest trial)."""
        waiting = len(supply.pending) + (supply.trials_left() if may_start else 0)
        return self._busy + waiting * max(1, self._min_width)

    def room(self, width: int, supply: TrialSupply, may_start: bool, leaving: int = 0) -> Room:
        """The room for a trial's next segment of ``width`` slots (see :class:`Room`); ``leaving``: the slots that trial
        held until its run ended, just now (0: none, a look at idle slots, or a parked PBT member's: its slots were
        free from when it parked, and the tasks sent since hold them; counted as its own, they made as many phantom
        trials that wait for it, and ``[elastic] shrink`` gave them a slot).

        Counted from what the controller sent, not from which tasks the workers have started (that news races the
        trial's end: a task queued behind the trial starts in its slots before the controller hears it ended): the
        tasks sent hold the slots beside the leaving trial's first; those beyond them waited for its slots, like
        the trials not sent (asked, or still to be asked)."""
        total = self._executor.slots().total
        held = min(self._busy, max(0, total - leaving))
        return Room(self.fits_width(width), total - held, self.wanted(supply, may_start) - held)

    def now(self) -> float:
        """The campaign's clock."""
        return self._clock()

    def slots_total(self) -> int:
        """The cluster's slots now."""
        return self._executor.slots().total

    def launched(self) -> int:
        """The slots the launched tasks hold, started or queued."""
        return self._busy

    # --- what happens to running trials -------------------------------------------------------------

    def in_flight(self, pending: Iterable[Prepared]) -> Waiting | None:
        """The trials sent out and not told, and ``pending`` (asked, not sent): how many, the widest (None: none)."""
        trials = [(r.width, r.number) for r in self.running.values()]
        trials += [(p.width, p.trial.number) for p in pending]
        if not trials:
            return None
        width, number = max(trials, key=lambda t: (t[0], -t[1]))
        return Waiting(len(trials), width, number)

    def started(self, event: Started) -> None:
        running = self.running.get(event.number)
        if running is not None:
            running.began(event.time, event.worker)

    def ended(self, number: int) -> RunningTrial | None:
        """A trial's run ended (its slots free up with its task); None for one not running here."""
        running = self.running.get(number)
        if running is None:
            return None
        self._leave_task(running)
        return running

    def forget(self, number: int) -> None:
        """The trial is done for good (it is being told)."""
        del self.running[number]

    def fits_width(self, width: int) -> bool:
        """Whether a trial of ``width`` slots can run on the cluster's workers together (none yet: assumed so)."""
        total = self._executor.slots().total
        return total < 1 or width <= total

    def request_stop(self, running: RunningTrial, stop: Stop, trigger_time: float) -> None:
        """Ask a trial to stop at its next report; ``stop.transition`` says what follows (a prune: PRUNED)."""
        running.stop(stop, trigger_time, self._clock())
        self._executor.stop(running.number)

    def request_stops(self, stops: Iterable[tuple[RunningTrial, Stop]]) -> None:
        """:meth:`request_stop` for each ``(trial, stop)``, triggered now (the resource budget's overrun)."""
        for running, stop in stops:
            self.request_stop(running, stop, self._clock())

    def enforce_time_limits(self, campaign_over: bool) -> None:
        """Past the time budget every trial is asked to stop; past ``trial_timeout``, that trial.

        A trial that has not ended ``stop_grace`` seconds after such a request (or after it
        started, when it was still queued) is killed with its worker's processes. The trials are looked at
        once every ``TIME_CHECK_INTERVAL`` seconds, and at once when the time budget runs out.
        """
        now = self._clock()
        limit = self._spec.study.trial_timeout
        first_over = campaign_over and not self._over_seen
        if not first_over and now - self._limits_checked_at < TIME_CHECK_INTERVAL:
            return  # a scan of every running trial per loop iteration: 12% of a 1,024-worker campaign's time
        self._limits_checked_at, self._over_seen = now, campaign_over
        for running in list(self.running.values()):
            if running.stop_reason:
                self._kill_if_hung(running, now)
            elif campaign_over:
                self.request_stop(running, Stop(TIME_BUDGET), now)
            elif limit > 0 and running.started_at is not None and now - running.started_at > limit:
                self.request_stop(running, Stop(TRIAL_TIMEOUT), now)

    def _kill_if_hung(self, running: RunningTrial, now: float) -> None:
        if running.kill_tried or running.stop_reason not in TIME_LIMITS or running.started_at is None:
            return
        waited = now - max(running.stop_requested_at, running.started_at)
        if waited <= self._spec.study.stop_grace:
            return
        running.kill_attempted()
        if not running.worker or not self._executor.kill(running.number, running.worker):
            return  # the executor said why; the trial keeps its slot until it ends by itself
        running.was_killed(f"{running.stop_reason}: killed after {waited:.0f} s without answering the stop request")
        log.warning("trial %d %s; its worker %s is restarted", running.number, running.killed, running.worker)
        for other in self.running.values():
            same_task = other.task == running.task and other.task != 0
            if other is not running and not other.killed and (same_task or other.worker == running.worker):
                other.hit_by_kill()


def _resumes_at(running: RunningTrial) -> int:
    """The epoch the trial's next run resumes at (:func:`~search.loop.segments.resume_epoch`): what the executor's
    walltime rule predicts is only the rest."""
    return resume_epoch(running.segment(), running.config, running.history())
