"""The campaign loop: ask -> submit -> collect reports -> prune -> tell, as short named steps.

The controller is the only writer of the study. It keeps every slot of the
cluster busy: as soon as a trial ends, its slot is refilled. Reports stream in
while trials run; each becomes an Optuna intermediate value, and the pruner may
answer with a stop request that the trial sees at its next report. Nothing here
blocks a worker: a trial only ever waits on its own training.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import pickle
import statistics
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import optuna
from optuna.trial import TrialState

from spaces.errors import SpaceError

from cluster.executor import Finished, Report, Started, TrialExecutor, TrialRequest

from search.sampling.asker import AskTimes, BackgroundAsker
from search.store.folder import CampaignFolder, write_atomic_bytes
from search.pipeline import SLOW_ASK_SECONDS, Pipeline
from search.sampling.process import NotPortable, ProcessAsker, ReplaySampler
from search.sampling.pruning import make_pruner, resource_of
from search.scaling.sweep import TargetGoal
from search.pbt.policy import PBTPolicy
from search.pbt.population import Population
from search.seeds import component_seed, trial_seed
from search.store.storage import flusher
from search.spec.campaign_spec import DATA_PARALLEL, REPLICA_SAFE, CampaignSpec, sampling_problem

__all__ = ["Campaign", "CampaignError", "Snapshot", "RunningTrial"]

log = logging.getLogger(__name__)

MAX_TRACEBACK = 20_000
TARGET_REACHED = "target reached"
SAMPLER_SAVE_INTERVAL = 2.0  # seconds between sampler pickles
DURATION_WINDOW = 64  # recent trial durations the dispatch depth is derived from
NEVER_STARTED = "time budget: never started"


class CampaignError(RuntimeError):
    """The campaign cannot go on (a message for the user, one line)."""


@dataclasses.dataclass
class RunningTrial:
    """A trial the controller has sent out and not yet told."""

    trial: optuna.Trial
    config: dict[str, Any]
    width: int
    submitted: float
    reports: list[tuple[int, dict[str, float], float]] = dataclasses.field(default_factory=list)
    recorded_steps: set[int] = dataclasses.field(default_factory=set)
    stop_reason: str = ""
    stop_trigger_time: float = 0.0  # when the report that led to the stop was sent (worker clock)
    stop_requested_at: float = 0.0
    attempts: int = 0  # re-runs after its worker was lost
    started_at: float | None = None  # when a worker began it (it may wait queued before)
    task: int = 0  # the executor task it runs in (a batch holds several trials)
    worker: str = ""  # where it started

    @property
    def number(self) -> int:
        return self.trial.number


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A trial asked and configured, waiting for enough free slots."""

    trial: optuna.Trial
    config: dict[str, Any]
    width: int
    sampler_saw: int = 0  # finished trials when it was sampled
    invalid: str = ""  # why its parameters cannot run (it is told FAIL without a slot)


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
    ) -> None:
        self.spec = spec
        self.folder = folder
        self.study = study
        self.executor = executor
        self._on_progress = on_progress or (lambda _s: None)
        self._poll = poll_interval
        self._clock = clock  # wall-clock seconds; a simulated executor passes its virtual clock
        self._flush = flush or flusher(study._storage)  # group commit: this iteration's writes, durable
        self._running: dict[int, RunningTrial] = {}
        self._counts = {"complete": 0, "pruned": 0, "failed": 0}
        self._started = clock()
        self._pruner_ready = spec.study.pruner in ("none", "median", "percentile") or spec.pruning.min_resource > 0
        self._resumable: list[optuna.trial.FrozenTrial] = []
        self._best: float | None = None
        self._pending: deque[Prepared] = deque()  # asked, not yet launched (they go first)
        self._durations: deque[float] = deque(maxlen=DURATION_WINDOW)
        self._next_number = 0  # the number the next ask gets
        self._next_to_tell = 0  # deterministic campaigns tell in number order
        self._told_early: dict[int, tuple[RunningTrial, dict[str, Any]]] = {}
        self._told: set[int] = set()
        self._sampler_saved = float("-inf")
        self._goal = _goal_of(spec)
        self._population = _population_of(spec, folder)
        fixed = spec.study.deterministic or self._population is not None
        self._pipeline = Pipeline(spec.study.dispatch_ahead, spec.study.batch_trials, fixed=fixed)
        self._sampling_asked = sampling or spec.study.sampling
        self._sampling = _sampling_mode(self._sampling_asked, spec.study.sampler, fixed, executor)
        self._asker: BackgroundAsker[Prepared] | ProcessAsker[Prepared] | None = None
        self._inline_times = AskTimes()  # asks on this thread when there is no asker
        self._min_width = min(spec.widths())
        self._busy = 0  # slots held by launched tasks
        self._task_seq = 0
        self._tasks: dict[int, list[int]] = {}  # task -> [width, trials still in it]
        self._claimed: set[int] = set()  # running tasks a queued task waits to follow on their worker
        self._place = not getattr(executor, "virtual_time", False)

    # --- the loop ------------------------------------------------------------------------

    def run(self) -> None:
        """Run until the budget is spent and every trial is told; Ctrl-C leaves trials resumable."""
        self._count_existing()
        self._check_capacity()
        try:
            self._start_asker()
            while True:
                self._fill_slots()
                self._flush()
                if not self._running and not self._more_coming():
                    break
                for event in self.executor.events(timeout=self._poll):
                    self._handle(event)
                self._enforce_time_limits()
                self._on_progress(self.snapshot())
        except BaseException:
            self._stop_asker()
            self._mark_interrupted()
            raise
        else:
            self._stop_asker()
            self._release_unstarted()
        finally:
            self._flush()
            self._save_sampler(force=True)
            self.executor.close()
        self._on_progress(self.snapshot())

    # --- sampling off the loop's thread ---------------------------------------------------------

    def _start_asker(self) -> None:
        if self._asker is not None or self._sampling == "inline":
            return
        name = f"sampler-{self.spec.study.name}"
        if self._sampling == "process":
            try:
                self._asker = ProcessAsker(self.study, self.spec.space.distributions(), self._ask_and_configure,
                                           self.executor.wake, name)  # fmt: skip
                return
            except NotPortable as exc:
                if self._sampling_asked == "process":
                    raise ValueError(f"sampling='process': {exc}") from exc
                log.warning("sampling on a thread instead of a child process: %s", exc)
                self._sampling = "thread"
        self._asker = BackgroundAsker(self._ask_and_configure, self.executor.wake, name)

    def _stop_asker(self) -> None:
        """Stop sampling; trials asked and not taken join the pending ones."""
        if self._asker is not None:
            self._pending.extend(self._asker.close())

    def _more_coming(self) -> bool:
        """Whether the asking thread still owes trials (nothing runs while it samples the first ones)."""
        if self._asker is None or not self._time_left():
            return False
        return self._asker.in_hand() > 0 or self._budget_left() > 0

    def _ask_and_configure(self, saw: int | None = None) -> Prepared:
        """The asker's job: one new trial with its config (or why it cannot run); ``saw``: known to the sampler."""
        saw = self._finished_count() if saw is None else saw
        return self._configure(self.study.ask(fixed_distributions=self.spec.space.distributions()), saw)

    def _configure(self, trial: optuna.Trial, saw: int) -> Prepared:
        try:
            config = self._trial_config(trial)
        except SpaceError as exc:  # e.g. a genome over the parameter limit: no slot is spent on it
            return Prepared(trial, {}, 1, saw, invalid=f"invalid parameters: {exc}")
        return Prepared(trial, config, int(config["data_parallel"]), saw)

    def _ask_seconds(self) -> float:
        return (self._asker.times if self._asker is not None else self._inline_times).ask_seconds

    def _handle(self, event: Started | Report | Finished) -> None:
        if isinstance(event, Report):
            self._on_report(event)
        elif isinstance(event, Started):
            if event.number in self._running:
                running = self._running[event.number]
                running.started_at, running.worker = event.time, event.worker
        else:
            self._on_finished(event)

    # --- budget and capacity ---------------------------------------------------------------

    def _count_existing(self) -> None:
        trials = self.study.get_trials(deepcopy=False)
        self._next_number = len(trials)
        for frozen in trials:
            if frozen.state.is_finished():
                self._mark_told(frozen.number)
            if frozen.state == TrialState.COMPLETE:
                self._counts["complete"] += 1
                self._track_best(frozen.values)
            elif frozen.state == TrialState.PRUNED:
                self._counts["pruned"] += 1
            elif frozen.state == TrialState.FAIL:
                self._counts["failed"] += 1
            elif frozen.state == TrialState.RUNNING:
                self._resumable.append(frozen)

    def _finished_count(self) -> int:
        return sum(self._counts.values())

    def _budget_left(self) -> int:
        """Trials not asked yet (asked ones in hand, queued, running or waiting to be told count as spent)."""
        asking = self._asker.in_hand() if self._asker is not None else 0
        in_hand = len(self._running) + len(self._resumable) + len(self._told_early) + len(self._pending) + asking
        left = self.spec.study.n_trials - self._finished_count() - in_hand
        return max(0, left)

    def _time_left(self) -> bool:
        budget = self.spec.study.time_budget
        return budget <= 0 or self._clock() - self._started < budget

    def _check_capacity(self) -> None:
        slots = self.executor.slots()
        if slots.total < 1:
            raise CampaignError("the cluster has no worker with a free slot")
        width = max(self.spec.widths())
        if width > slots.widest:
            raise CampaignError(
                f"a trial may need {width} {slots.resource} slots (data_parallel) "
                f"but the widest worker has {slots.widest}; give workers more slots or lower data_parallel"
            )

    def _new_task(self, members: list[RunningTrial]) -> None:
        """The trials (one width) the executor runs as one task; it holds its slots until all are done."""
        self._task_seq += 1
        self._tasks[self._task_seq] = [members[0].width, len(members)]
        self._busy += members[0].width
        for running in members:
            running.task = self._task_seq

    def _leave_task(self, running: RunningTrial) -> None:
        task = self._tasks.get(running.task)
        if task is None:
            return
        task[1] -= 1
        if task[1] <= 0:
            self._busy -= task[0]
            del self._tasks[running.task]
            self._claimed.discard(running.task)
        running.task = 0

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
        for r in self._running.values():
            if r.started_at is None or not r.worker or r.task in self._claimed or r.width != 1:
                continue
            if oldest is None or r.started_at < oldest.started_at:  # type: ignore[operator]
                oldest = r
        if oldest is None:
            return ""
        self._claimed.add(oldest.task)
        return oldest.worker

    # --- dispatch ------------------------------------------------------------------------------

    def _fill_slots(self) -> None:
        """Launch tasks while there are free slots, plus ``ahead`` tasks queued at the workers.

        A free slot gets whatever is asked (a partial batch); the queue beyond the
        free slots gets full batches only.
        """
        slots = self.executor.slots().total
        batch = self._batch_size()
        ahead = self._ahead(slots, batch)
        capacity = slots + ahead * self._min_width
        place = ahead < slots  # a short queue: which worker a queued task waits at matters
        spare = self._pipeline.spare(slots, self._median_duration(), self._ask_seconds())
        while self._time_left():
            self._want_asked(slots, capacity, batch, spare)
            group = self._next_group(batch)
            if not group:
                if self.spec.study.deterministic:
                    self._flush_in_order()  # the budget may be fully asked now
                return
            width = group[0].width
            fits = self._busy + width <= slots or (self._busy + width <= capacity and len(group) == batch)
            # sampling may outlast the time budget; a child process may still be sending this batch
            if not self._time_left() or (self._running and not fits) or self._batch_on_its_way(group, batch):
                self._pending.extendleft(reversed(group))  # asked already: they go first when slots free up
                return
            self._launch(group, self._preferred_worker(width) if place and self._busy + width > slots else "")
        self._want_asked(slots, 0, batch, 0)

    def _batch_on_its_way(self, group: list[Prepared], batch: int) -> bool:
        """A child process sends trials one at a time: wait for the batch it owes rather than launch each.

        A batch is at most ``TASK_SECONDS`` of asks, so a slot waits no longer than that;
        launching a task per trial would cost the controller, scheduler and workers the
        CPU the sampler needs.
        """
        return isinstance(self._asker, ProcessAsker) and len(group) < batch and self._asker.in_hand() > 0

    def _batch_size(self) -> int:
        if not hasattr(self.executor, "submit_batch"):
            return 1
        return self._pipeline.batch(self._median_duration(), self._ask_seconds())

    def _ahead(self, slots: int, batch: int = 1) -> int:
        """Tasks queued at the workers beyond the free slots, so a freed slot restarts at once (see pipeline)."""
        return self._pipeline.ahead(slots, self._median_duration(), batch)

    def _median_duration(self) -> float | None:
        return statistics.median(self._durations) if self._durations else None

    def _want_asked(self, slots: int, capacity: int, batch: int, spare: int) -> None:
        """Tell the asking thread how many trials to have ready: what is free plus spares, within budget.

        None for a fast sampler on this process: it is asked on the loop's thread, when needed.
        """
        if self._asker is None:
            return
        wanted = 0
        if (self._sampler_is_slow() or not self._asker.asks_here) and self._time_left():
            free_tasks = max(0, capacity - self._busy) // max(1, self._min_width)
            wanted = max(0, batch * free_tasks + spare - len(self._pending))
            wanted = min(wanted, self._asker.in_hand() + self._budget_left())
        starved = not self._pending and self._busy < slots and self._asker.asks_here  # a slot waits for a trial
        self._asker.want(wanted, wake_at=1 if starved else batch)

    def _next_group(self, batch: int) -> list[Prepared]:
        """Up to ``batch`` prepared trials of one width, the pending ones first.

        Fetched trials wait in ``_pending`` (which the budget counts) until they are grouped.
        """
        while len(self._pending) < batch and (item := self._fetch()) is not None:
            self._pending.append(item)
        group: list[Prepared] = []
        while self._pending and len(group) < batch and (not group or self._pending[0].width == group[0].width):
            group.append(self._pending.popleft())
        return group

    def _fetch(self) -> Prepared | None:
        """The next trial to launch: resumed first, then asked (by the asking thread, or here)."""
        if self._asker is None or self._resumable:
            return self._prepare_next()
        while (item := self._asker.take() or self._ask_here()) is not None:
            if not item.invalid:
                return item
            self._reject(item.trial, item.invalid)  # e.g. a genome over the parameter limit: no slot spent
        return None

    def _sampler_is_slow(self) -> bool:
        return self._asker is not None and self._asker.times.asked > 0 and self._ask_seconds() >= SLOW_ASK_SECONDS

    def _ask_here(self) -> Prepared | None:
        """A fast sampler is asked on this thread (cheaper than a hand-over); a slow one only on its own."""
        if self._asker is None or self._sampler_is_slow() or self._budget_left() <= 0:
            return None
        return self._asker.ask_here()

    def _prepare_next(self) -> Prepared | None:
        """The next trial to run, asked and configured; None when the budget is spent (or must wait)."""
        while True:
            if self._resumable:
                trial = self._reopen(self._resumable.pop(0))
            elif self._budget_left() > 0 and self._may_ask():
                started = time.perf_counter()
                trial = self._ask()
                self._inline_times.record(time.perf_counter() - started)
            else:
                return None
            prepared = self._configure(trial, self._finished_count())
            if not prepared.invalid:
                return prepared
            self._reject(trial, prepared.invalid)

    def _may_ask(self) -> bool:
        """Deterministic campaigns sample trial k from trials 0..k-P-1 only, once all of them are told."""
        if not self.spec.study.deterministic:
            return True
        return self._next_to_tell >= self._next_number - self.spec.study.parallelism

    def _ask(self) -> optuna.Trial:
        trial = self.study.ask(fixed_distributions=self.spec.space.distributions())
        self._next_number = trial.number + 1
        if self.spec.study.deterministic:
            self._flush_in_order()
        return trial

    def _reopen(self, frozen: optuna.trial.FrozenTrial) -> optuna.Trial:
        """A trial left RUNNING by a controller that died: run it again, same number and params."""
        log.info("trial %d was left running; starting it again", frozen.number)
        return optuna.Trial(self.study, frozen._trial_id)

    def _trial_config(self, trial: optuna.Trial) -> dict[str, Any]:
        trainer = self.spec.trainer
        params = self.spec.space.complete(trial.params)
        data_parallel = int(params.pop(DATA_PARALLEL, trainer.data_parallel))
        config = {
            "study": self.spec.study.name,
            "number": trial.number,
            "params": params,
            "seed": trial_seed(self.spec.study.seed, trial.number),
            "epochs": trainer.epochs,
            "dataset": trainer.dataset,
            "device": trainer.device,
            "data_parallel": data_parallel,
            "checkpoint_dir": str(self.folder.trial(trial.number)),
            "checkpoint_every": trainer.checkpoint_every,
            "deterministic": self.spec.study.deterministic,
            "options": dict(trainer.options),
        }
        return self._population.first_segment(config) if self._population else config

    def _launch(self, group: list[Prepared], prefer: str = "") -> None:
        """Send trials of one width to the executor as one task (a batch when there are several)."""
        members = []
        for prepared in group:
            trial, config = prepared.trial, prepared.config
            self.folder.trial(trial.number).mkdir(parents=True, exist_ok=True)
            trial.set_user_attr("seed", config["seed"])
            trial.set_user_attr("config", config)
            trial.set_user_attr("width", prepared.width)
            trial.set_user_attr("sampler_saw", prepared.sampler_saw)
            if len(group) > 1:
                trial.set_user_attr("batch", len(group))
            running = RunningTrial(trial, config, prepared.width, self._clock())
            self._running[trial.number] = running
            members.append(running)
        self._new_task(members)
        requests = [TrialRequest(r.number, self.spec.trainer.entry, r.config, r.width, prefer) for r in members]
        if len(requests) == 1:
            self.executor.submit(requests[0])
        else:
            self.executor.submit_batch(requests)  # type: ignore[attr-defined] - only when it has one

    def _resubmit(self, running: RunningTrial) -> None:
        """The same trial again, on its own (a retry, or a population member's next segment)."""
        self._new_task([running])
        self.executor.submit(TrialRequest(running.number, self.spec.trainer.entry, running.config, running.width))

    def _reject(self, trial: optuna.Trial, reason: str) -> None:
        trial.set_user_attr("fail_reason", reason)
        self.study.tell(trial, state=TrialState.FAIL)
        self._mark_told(trial.number)
        self._counts["failed"] += 1
        log.info("trial %d rejected before dispatch: %s", trial.number, reason)

    # --- reports and pruning -------------------------------------------------------------------

    def _on_report(self, report: Report) -> None:
        running = self._running.get(report.number)
        if running is None:
            return  # a late report of a trial already told; its history came with the outcome
        running.reports.append((report.step, dict(report.metrics), report.time))
        self._append_metrics_file(report.number, report.step, report.metrics, report.time, report.worker)
        self._record_intermediate(running, report.step, report.metrics)
        if self._goal is not None and not running.stop_reason and self._goal.reached(report.metrics):
            self._request_stop(running, TARGET_REACHED, report.time)
        if running.stop_reason or self.spec.study.multi_objective:
            return
        if self._should_prune(running):
            self._request_stop(running, "pruned", report.time)
            log.info("trial %d pruned at step %d", report.number, report.step)

    def _record_intermediate(self, running: RunningTrial, step: int, metrics: Mapping[str, float]) -> None:
        if self.spec.study.multi_objective:
            return
        value = metrics.get(self.spec.study.metrics[0])
        if value is None or not math.isfinite(value):
            return
        resource = resource_of(step, metrics, self.spec.pruning.resource)
        if resource in running.recorded_steps:
            return
        running.recorded_steps.add(resource)
        running.trial.report(float(value), resource)
        self._ensure_pruner(resource)

    def _ensure_pruner(self, first_resource: int) -> None:
        if self._pruner_ready:
            return
        pruner = make_pruner(self.spec.study.pruner, self.spec.pruning, first_resource)
        if pruner is not None:
            self.study.pruner = pruner
            self._pruner_ready = True
            log.info("pruner %s: a rung is %d %s", self.spec.study.pruner, first_resource, self.spec.pruning.resource)

    def _should_prune(self, running: RunningTrial) -> bool:
        return self._pruner_ready and running.trial.should_prune()

    def _append_metrics_file(
        self, number: int, step: int, metrics: Mapping[str, float], at: float, worker: str = ""
    ) -> None:
        record = {"step": step, "time": at, "worker": worker, **{k: _json_num(v) for k, v in metrics.items()}}
        with open(self.folder.trial(number) / "metrics.jsonl", "a") as fh:
            fh.write(json.dumps(record) + "\n")

    # --- time limits ---------------------------------------------------------------------------

    def _enforce_time_limits(self) -> None:
        now = self._clock()
        campaign_over = not self._time_left()
        limit = self.spec.study.trial_timeout
        for running in self._running.values():
            if running.stop_reason:
                continue
            if campaign_over:
                self._request_stop(running, "time budget", now)
            elif limit > 0 and running.started_at is not None and now - running.started_at > limit:
                self._request_stop(running, "trial timeout", now)

    def _request_stop(self, running: RunningTrial, reason: str, trigger_time: float) -> None:
        """Ask a trial to stop at its next report; it ends PRUNED with ``reason``."""
        running.stop_reason = reason
        running.stop_trigger_time = trigger_time
        running.stop_requested_at = self._clock()
        self.executor.stop(running.number)

    # --- results -------------------------------------------------------------------------------

    def _on_finished(self, event: Finished) -> None:
        running = self._running.get(event.number)
        if running is None:
            return
        self._leave_task(running)
        if self._should_retry(running, event.outcome):
            self._retry(running, event.outcome)
            return
        if self._next_segment(running, event.outcome):
            return
        del self._running[event.number]
        if not self.spec.study.deterministic:
            self._tell(running, dict(event.outcome))
            return
        self._told_early[event.number] = (running, dict(event.outcome))
        self._flush_in_order()

    def _flush_in_order(self) -> None:
        """Deterministic campaigns tell trial j in number order, once trial j+P has been asked.

        So trial k is sampled from exactly trials 0..k-P-1, whatever the timing or the worker count.
        """
        all_asked = self._budget_left() == 0 and not self._pending
        lag = self.spec.study.parallelism
        while self._next_to_tell in self._told_early and (all_asked or self._next_to_tell + lag < self._next_number):
            self._tell(*self._told_early.pop(self._next_to_tell))

    def _save_sampler(self, force: bool = False) -> None:
        """Pickle the sampler (RNG state included) now and then, so ``resume`` continues its stream.

        Never while the asking thread samples: a busy sampler is saved on a later turn.
        """
        now = time.monotonic()
        if not force and now - self._sampler_saved < SAMPLER_SAVE_INTERVAL:
            return
        lock = self._asker.sampler_lock if self._asker is not None else None
        if lock is not None and not lock.acquire(blocking=force, timeout=30.0 if force else -1):
            return
        try:
            self._sampler_saved = now
            state = self._sampler_bytes(force)
            if state is not None:
                write_atomic_bytes(self.folder.sampler_state, state)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            log.warning("sampler state not saved (%s); resume will start a fresh sampler", exc)
        finally:
            if lock is not None:
                lock.release()

    def _sampler_bytes(self, force: bool) -> bytes | None:
        """The sampler pickled; while a child process samples, its copy (None until it has sent one)."""
        if isinstance(self.study.sampler, ReplaySampler) and isinstance(self._asker, ProcessAsker):
            return self._asker.sampler_state(wait=30.0 if force else 0.0)
        return pickle.dumps(self.study.sampler)

    def _next_segment(self, running: RunningTrial, outcome: Mapping[str, Any]) -> bool:
        """Population-based training: submit the member's next segment; False when it is done."""
        if self._population is None or outcome.get("status") != "ok" or running.stop_reason:
            return False
        self._replay_missed_reports(running, outcome.get("history") or [])
        config = self._population.next_segment(running.config, dict(outcome.get("metrics") or {}))
        if config is None:
            history = [(step, m) for step, m, _t in running.reports]
            for key, value in self._population.attributes(running.number, history).items():
                running.trial.set_user_attr(key, value)
            return False
        running.config = config
        self._resubmit(running)
        return True

    def _should_retry(self, running: RunningTrial, outcome: Mapping[str, Any]) -> bool:
        return (
            outcome.get("status") == "lost"
            and running.attempts < self.spec.study.max_retries
            and not running.stop_reason
        )

    def _retry(self, running: RunningTrial, outcome: Mapping[str, Any]) -> None:
        """Its worker died: run the same trial again elsewhere; it resumes from its last checkpoint."""
        running.attempts += 1
        running.trial.set_user_attr("retries", running.attempts)
        log.warning("trial %d lost its worker (%s); retry %d of %d",
                    running.number, outcome.get("error"), running.attempts, self.spec.study.max_retries)
        self._resubmit(running)

    def _mark_told(self, number: int) -> None:
        self._told.add(number)
        while self._next_to_tell in self._told:
            self._next_to_tell += 1

    def _tell(self, running: RunningTrial, outcome: dict[str, Any]) -> None:
        self._replay_missed_reports(running, outcome.get("history") or [])
        self._record_outcome_attrs(running, outcome)
        state, values, reason = self._verdict(running, outcome)
        if reason:
            running.trial.set_user_attr("fail_reason" if state == TrialState.FAIL else "stop_reason", reason)
        if state == TrialState.FAIL:
            self._write_failure_log(running, outcome, reason)
        self.study.tell(running.trial, values if state == TrialState.COMPLETE else None, state=state)
        self._mark_told(running.number)
        self._save_sampler()
        key = {TrialState.COMPLETE: "complete", TrialState.PRUNED: "pruned", TrialState.FAIL: "failed"}[state]
        self._counts[key] += 1
        if state == TrialState.COMPLETE:
            self._track_best(values)
        log.info("trial %d %s%s", running.number, state.name, f" ({reason})" if reason else "")

    def _replay_missed_reports(self, running: RunningTrial, history: list) -> None:
        """Record reports the event stream had not delivered when the result arrived."""
        seen = {(step, t) for step, _m, t in running.reports}
        for step, metrics, at in history:
            if (int(step), float(at)) in seen:
                continue
            running.reports.append((int(step), dict(metrics), float(at)))
            self._append_metrics_file(running.number, int(step), metrics, float(at))
            self._record_intermediate(running, int(step), metrics)

    def _record_outcome_attrs(self, running: RunningTrial, outcome: Mapping[str, Any]) -> None:
        trial = running.trial
        for key in ("worker", "host", "devices", "started", "finished"):
            if key in outcome:
                trial.set_user_attr(key, outcome[key])
        if "started" in outcome and "finished" in outcome:
            duration = float(outcome["finished"]) - float(outcome["started"])
            trial.set_user_attr("duration", duration)
            self._durations.append(duration)
        if running.stop_reason and "finished" in outcome:
            # report sent -> trial stopped: how long a stop decision takes to take effect
            trial.set_user_attr("stop_latency", float(outcome["finished"]) - running.stop_trigger_time)
            trial.set_user_attr("stop_requested_at", running.stop_requested_at)
        metrics = {k: _json_num(v) for k, v in dict(outcome.get("metrics") or {}).items()}
        trial.set_user_attr("metrics", metrics)
        for size in ("n_params", "macs"):  # model size, where the trainer measures it
            if size in metrics:
                trial.set_user_attr(size, metrics[size])
        trial.set_user_attr("history", [[s, {k: _json_num(v) for k, v in m.items()}] for s, m, _t in running.reports])

    def _verdict(self, running: RunningTrial, outcome: Mapping[str, Any]) -> tuple[TrialState, list[float], str]:
        status = outcome.get("status")
        if status != "ok":
            return TrialState.FAIL, [], self._failure_reason(outcome)
        if running.stop_reason and running.stop_reason != TARGET_REACHED:
            return TrialState.PRUNED, [], running.stop_reason
        metrics = dict(outcome.get("metrics") or {})
        values: list[float] = []
        if self._goal is not None:
            return TrialState.COMPLETE, [self._goal.value([(st, m) for st, m, _t in running.reports])], ""
        for name in self.spec.study.metrics:
            if name not in metrics:
                return TrialState.FAIL, [], f"trainer did not return metric {name!r} (it returned {sorted(metrics)})"
            if not math.isfinite(metrics[name]):
                return TrialState.FAIL, [], f"metric {name!r} is {metrics[name]}"
            values.append(float(metrics[name]))
        return TrialState.COMPLETE, values, ""

    @staticmethod
    def _failure_reason(outcome: Mapping[str, Any]) -> str:
        status = outcome.get("status")
        error = str(outcome.get("error") or "unknown error")
        if status == "lost":
            return f"worker lost ({error}); retries spent"
        if status == "cancelled":
            return f"cancelled: {error}"
        return error

    def _write_failure_log(self, running: RunningTrial, outcome: Mapping[str, Any], reason: str) -> None:
        text = str(outcome.get("traceback") or reason)
        running.trial.set_user_attr("traceback", text[-MAX_TRACEBACK:])
        path = self.folder.trial(running.number) / "error.log"
        path.write_text(f"trial {running.number} failed: {reason}\n\n{text}\n")

    def _mark_interrupted(self) -> None:
        """Leave unfinished trials RUNNING (resumable, same number and params) and say so."""
        trials = [r.trial for r in self._running.values()] + [r.trial for r, _o in self._told_early.values()]
        trials += [p.trial for p in self._pending]
        for trial in trials:
            try:
                trial.set_user_attr("interrupted", True)
            except Exception as exc:  # noqa: BLE001 - storage may be gone too; resume still finds RUNNING
                log.warning("could not mark trial %d interrupted: %s", trial.number, exc)

    def _release_unstarted(self) -> None:
        """Trials asked but never launched (the time budget ran out first) end PRUNED, so none stays RUNNING."""
        while self._pending:
            prepared = self._pending.popleft()
            if prepared.invalid:
                self._reject(prepared.trial, prepared.invalid)
                continue
            prepared.trial.set_user_attr("stop_reason", NEVER_STARTED)
            self.study.tell(prepared.trial, state=TrialState.PRUNED)
            self._mark_told(prepared.trial.number)
            self._counts["pruned"] += 1

    # --- progress ------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        return Snapshot(
            complete=self._counts["complete"],
            pruned=self._counts["pruned"],
            failed=self._counts["failed"],
            running=len(self._running),
            budget=self.spec.study.n_trials,
            best=self._best_value(),
            elapsed=self._clock() - self._started,
        )

    def _best_value(self) -> float | None:
        return self._best

    def _track_best(self, values: list[float] | None) -> None:
        if self.spec.study.multi_objective or not values:
            return
        value = float(values[0])
        better = max if self.spec.objective_directions[0] == "maximize" else min
        self._best = value if self._best is None else better(self._best, value)


def _sampling_mode(requested: str, sampler: str, fixed: bool, executor: TrialExecutor) -> str:
    """Where the sampler runs: ``inline`` when the order of asks matters (deterministic, PBT) or time
    is virtual; otherwise, on ``auto``, in a child ``process`` for the samplers that allow it, else on a ``thread``.
    """
    ordered = fixed or bool(getattr(executor, "virtual_time", False))
    problem = sampling_problem(requested, sampler, ordered)
    if problem:
        raise ValueError(f"sampling: {problem}")
    if ordered:
        return "inline"
    if requested == "auto":
        return "process" if sampler in REPLICA_SAFE else "thread"
    return requested


def _population_of(spec: CampaignSpec, folder: CampaignFolder) -> Population | None:
    if spec.pbt is None:
        return None
    dists = spec.space.distributions()
    policy = PBTPolicy(spec.pbt, spec.study.directions[0] == "maximize", dists, component_seed(spec.study.seed, "pbt"))
    return Population(policy, folder, spec.study.metrics[0], spec.trainer.epochs)


def _goal_of(spec: CampaignSpec) -> TargetGoal | None:
    if spec.scaling is None:
        return None
    mode = "max" if spec.study.directions[0] == "maximize" else "min"
    return TargetGoal(spec.study.metrics[0], spec.scaling.target, mode, spec.scaling.interpolate)


def _json_num(value: float) -> float | str:
    value = float(value)
    return value if math.isfinite(value) else str(value)
