"""The executor's side of slot runners (:mod:`cluster.slot_runner`): start them, fill their inboxes, and place again
whatever a runner did not run.

A one-slot trial goes to an idle runner, else waits for one being started (up to one runner per slot of the
cluster), else queues behind the runner expected to free first; it travels straight from the client to the
runner's worker. Trials wider than one slot, or wider than a worker, stay Dask tasks of their own (the pool is
retired for the rest of the campaign when the first comes, so that the runners give their slots back).

A runner that ends (idle, retired), dies with its worker (the scheduler's ``remove-worker`` event, or a later look
at the cluster's workers) or is cancelled (``kill``) hands its trials back: one that said it started ends as lost
(cancelled, for a kill), with the outcome the runner kept when it has one; the others are placed again under the
same first-run key (so that none can run twice).

On a batch-job cluster a runner takes a trial only when the trial is predicted to end before the runner's job does,
after the trials queued there before it (:mod:`cluster.walltimes`: the campaign's trial model); a trial no ready
runner has the time for waits for a job that has, and one line says so (once, until the trials so held have
started).
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from . import way_out
from .connect import worker_slots
from .executor_queue import EventQueue, RunnerDone
from .jobs import _notify, job_deadlines
from .outcome import Outcome, TrialStatus
from .runner_mail import Placement, RunnerMail
from .slot_runner import run_slot, runner_key
from .trial_cost import TrialPredictions
from .walltimes import Walltimes

if TYPE_CHECKING:
    from distributed import Client, Future


__all__ = ["RunnerPool"]

log = logging.getLogger(__name__)

RUNNER_IDLE = 10.0  # seconds a runner waits with nothing to run before it gives its slot back
CHECK_SECONDS = 1.0  # between looks at whether every runner's worker is still there
RESULT_TIMEOUT = 30.0  # seconds to fetch an ended runner's result
RETIRE_TIMEOUT = 5.0  # seconds to tell every runner to end, on close


@dataclasses.dataclass(eq=False)
class Runner:
    """One runner task: its worker once it said it is ready, and the trials sent to it that have not ended."""

    key: str
    future: Future
    worker: str = ""
    trials: dict[int, Placement] = dataclasses.field(default_factory=dict)  # in the order sent
    started: dict[int, float] = dataclasses.field(default_factory=dict)  # number -> when it said it started
    closed: bool = False  # takes no more trials (ended, retired, or refused a put)
    lost: str = ""  # why its worker is gone, when it is

    @property
    def ready(self) -> bool:
        return bool(self.worker) and not self.closed

    def order(self, prefer: str) -> tuple[int, bool, float]:
        """Sort key: fewest trials, on the preferred worker, running the oldest trial (the first to free)."""
        first = next(iter(self.trials), None)
        return len(self.trials), self.worker != prefer, self.started.get(first, 0.0) if first is not None else 0.0


class RunnerPool:
    """The slot runners of one executor (its client, topic, resource and share of a device per slot); ``costs()``: the
    trial model the executor reads (see :mod:`cluster.walltimes`); ``notify``: where the line of a trial held for a
    walltime goes (the terminal and campaign.log)."""

    def __init__(
        self,
        client: Client,
        topic: str,
        resource: str,
        events: EventQueue,
        ship: Callable[[Any], Any],
        slots: Callable[[], int],
        share: float = 1.0,
        headroom: float = 0.9,
        idle: float = RUNNER_IDLE,
        *,
        costs: Callable[[], TrialPredictions],
        notify: Callable[[str], None] = _notify,
    ) -> None:
        self._client, self._topic, self._resource = client, topic, resource
        self._events, self._idle = events, idle
        self._mail = RunnerMail(client, ship, events)
        self._slots, self._share, self._headroom = slots, share, headroom  # the cluster's one-slot capacity, now
        self._lock = threading.Lock()
        self._runners: dict[str, Runner] = {}
        self._of: dict[int, Runner] = {}  # trial -> the runner it was sent to
        self._waiting: collections.deque[Placement] = collections.deque()  # for a runner being started
        self._checked = 0.0
        # batch jobs: no trial for a worker whose job ends before it would (the campaign's trial model predicts)
        self._walltimes = Walltimes(lambda: job_deadlines(client), costs)
        self._notify = notify
        self._refused: dict[int, float] = {}  # this look: trials a ready runner had no time for -> the most time left
        self._held: set[int] = set()  # trials held for a walltime since the line that said so, until they start
        self._missing: set[str] = set()  # runners' workers the last look did not find
        self.retired = False

    # --- placing ------------------------------------------------------------------------------------

    def has(self, number: int) -> bool:
        with self._lock:
            return number in self._of or any(p.number == number for p in self._waiting)

    def future_of(self, number: int) -> Future | None:
        with self._lock:
            runner = self._of.get(number)
            return runner.future if runner is not None else None

    def busy_workers(self) -> list[str]:
        """The workers whose runners hold a trial (sent, running, or not ended yet)."""
        with self._lock:
            return sorted({r.worker for r in self._runners.values() if r.trials and r.worker})

    def running(self) -> tuple[int, ...]:
        with self._lock:
            return (*self._of, *(p.number for p in self._waiting))

    def place(self, placements: Iterable[Placement]) -> None:
        """Send ``placements`` to runners (starting runners for them, up to one per slot of the cluster)."""
        with self._lock:
            self._waiting.extend(placements)
            if not self.retired:  # a retired pool's waiting trials go as tasks (the executor takes them)
                self._start_runners()
                self._dispatch()

    def tick(self) -> None:
        """Start the runners that trials still wait for (the cluster had no free slot for them when they came:
        its workers were restarting, say)."""
        self._walltimes.refresh()
        with self._lock:
            if self._waiting and not self.retired:
                self._start_runners()
                self._dispatch()

    def _start_runners(self) -> None:
        """Start a runner for each trial that no idle or starting runner will take, up to one per slot (each where
        its trial would rather run)."""
        idle = sum(1 for r in self._runners.values() if r.ready and not r.trials and self._takes_any(r))
        starting = sum(1 for r in self._runners.values() if not r.worker and not r.closed)
        wanted = min(len(self._waiting) - idle - starting, self._slots() - len(self._runners))
        prefers = [str(self._waiting[idle + starting + i].request.prefer) for i in range(max(0, wanted))]
        # A preference for a worker that is gone (its batch job ended, say) is dropped: Dask leaves a task that
        # prefers an unknown worker unscheduled when it came while no worker was there, even with other workers
        # joining since (every worker's job reached its walltime at once).
        live = set(worker_slots(self._client)) if any(prefers) else set()
        for prefer in prefers:
            key = runner_key(self._topic, time.monotonic_ns())
            where: dict[str, Any] = {"workers": [prefer], "allow_other_workers": True} if prefer in live else {}
            future = self._client.submit(
                run_slot,
                key,
                self._topic,
                self._resource,
                self._share,
                self._headroom,
                self._idle,
                key=key,
                resources={self._resource: self._share},
                pure=False,
                **where,
            )
            self._runners[key] = Runner(key, future)
            future.add_done_callback(lambda _f, k=key: self._events.put(RunnerDone(k)))

    def _dispatch(self) -> None:
        """Give waiting trials to idle runners (a trial to a runner on the worker it would rather run on first);
        with no runner starting, queue them behind the busy ones. Trials that share a first-run key (a batch) go
        to one runner together. A runner takes only a trial its job has the time for (:meth:`_fits`)."""
        if self.retired:
            return
        starting = any(not r.worker and not r.closed for r in self._runners.values())
        self._refused.clear()
        batches: dict[str, list[Placement]] = {}
        while self._waiting:
            chosen = self._next_pair(starting)
            if chosen is None:
                break
            runner, index = chosen
            key = self._waiting[index].key
            group = [p for p in self._waiting if p.key == key]
            self._waiting = collections.deque(p for p in self._waiting if p.key != key)
            for placement in group:
                runner.trials[placement.number] = placement
                self._of[placement.number] = runner
                self._held.discard(placement.number)
            batches.setdefault(runner.key, []).extend(group)
        for key, batch in batches.items():
            runner = self._runners[key]
            self._mail.send(runner.key, runner.worker, batch)
        if not starting:
            self._say_held()

    def _next_pair(self, starting: bool) -> tuple[Runner, int] | None:
        """The runner to give a waiting trial to, and which trial (its index in the queue); None to wait.

        An idle runner takes the first trial that would rather run on its worker, else the first trial (whichever
        runner became ready first, so a runner started for one trial can take another, and a trial does not land
        where it did not want to when its own runner comes next); with none idle and none starting, the first trial
        queues behind the runner expected to free first. Each only where the runner's job has the time for the
        trial: a trial too long for it is passed over for a shorter one that fits."""
        idle = [r for r in self._runners.values() if r.ready and not r.trials]
        for runner in idle:
            for index, placement in enumerate(self._waiting):
                if placement.request.prefer == runner.worker and self._fits(runner, placement):
                    return runner, index
        for runner in idle:
            for index, placement in enumerate(self._waiting):
                if self._fits(runner, placement):
                    return runner, index
        ready = [r for r in self._runners.values() if r.ready]
        if not ready or starting:
            return None  # a runner on its way takes it sooner than a busy one frees
        for index, placement in enumerate(self._waiting):
            fitting = [r for r in ready if self._fits(r, placement)]
            if fitting:
                return min(fitting, key=lambda r: r.order(placement.request.prefer)), index
        return None

    def _fits(self, runner: Runner, placement: Placement) -> bool:
        """Whether ``runner``'s batch job (if any) has the time for ``placement``'s trial after the trials queued
        there (:class:`~cluster.walltimes.Walltimes`); a refusal is kept for the line that says a trial waits."""
        queue = [(p.request, runner.started.get(n)) for n, p in runner.trials.items()]
        left = self._walltimes.time_left(runner.worker, queue)
        if self._walltimes.fits(placement.request, left):
            return True
        assert left is not None  # refused: the job has an end
        self._refused[placement.number] = max(left, self._refused.get(placement.number, -float("inf")))
        return False

    def _takes_any(self, runner: Runner) -> bool:
        """Whether ``runner`` has the time for one of the waiting trials."""
        return any(self._fits(runner, placement) for placement in self._waiting)

    def _say_held(self) -> None:
        """One line when trials start to wait for a job with the time (every ready runner refused them), none more
        until every trial so held has started."""
        held = [p for p in self._waiting if p.number in self._refused]
        self._held &= {p.number for p in self._waiting}  # those that left otherwise (the pool retired, say)
        if held and not self._held:
            self._notify(self._walltimes.held_line(held[0].request, self._refused[held[0].number]))
        self._held.update(p.number for p in held)

    # --- events -------------------------------------------------------------------------------------

    def ready(self, key: str, worker: str) -> None:
        """Runner ``key`` started on ``worker``: it takes trials now."""
        with self._lock:
            runner = self._runners.get(key)
            if runner is None or runner.closed:
                return
            runner.worker = worker
            if self.retired:  # started after the others were told to end: it ends too
                runner.closed = True
                self._mail.retire(key, worker, now=False)
                return
            self._dispatch()

    def started(self, number: int, at: float) -> None:
        with self._lock:
            runner = self._of.get(number)
            if runner is not None:
                runner.started[number] = at

    def ended(self, number: int) -> None:
        """Trial ``number``'s outcome arrived: its runner has room for the next."""
        with self._lock:
            runner = self._of.pop(number, None)
            if runner is not None:
                runner.trials.pop(number, None)
                runner.started.pop(number, None)
                self._walltimes.forget(number)
                self._dispatch()

    def refused(self, key: str, numbers: Iterable[int]) -> None:
        """Runner ``key`` took none of ``numbers`` (it had closed, or its worker is gone): place them again."""
        with self._lock:
            runner = self._runners.get(key)
            if runner is None:
                return
            runner.closed = True
            self._requeue(runner, [n for n in numbers if self._of.get(n) is runner])
            if not self.retired:
                self._start_runners()
                self._dispatch()

    def _requeue(self, runner: Runner, numbers: list[int]) -> None:
        again = [dataclasses.replace(runner.trials.pop(n), fresh=False) for n in numbers if n in runner.trials]
        for placement in again:
            self._of.pop(placement.number, None)
            runner.started.pop(placement.number, None)
        self._waiting.extendleft(reversed(again))

    def done(self, key: str) -> list[tuple[int, Outcome]]:
        """Runner ``key``'s task ended: the outcomes of its trials that end with it; the rest are placed again."""
        with self._lock:
            runner = self._runners.pop(key, None)
        if runner is None:
            return []
        result, why = _result(runner.future)
        with self._lock:
            runner.closed = True
            recent: dict[int, Outcome] = (result or {}).get("recent", {})
            unrun = set((result or {}).get("unrun", ()))
            ended: list[tuple[int, Outcome]] = []
            for number, placement in list(runner.trials.items()):
                if number in recent:
                    ended.append((number, recent[number]))
                elif number in runner.started and placement.key not in unrun:
                    ended.append((number, _unfinished(runner, why)))
            for number, _ in ended:
                runner.trials.pop(number)
                self._of.pop(number, None)
            self._requeue(runner, list(runner.trials))
            if not self.retired:
                self._start_runners()
                self._dispatch()
        return ended

    def lost_worker(self, worker: str) -> None:
        """``worker`` left the cluster: its runners end now (cancelled, so that Dask does not start them again)."""
        with self._lock:
            gone = [r for r in self._runners.values() if r.worker == worker and not r.lost]
            for runner in gone:
                runner.closed = True
                runner.lost = f"its worker {worker} left the cluster"
        if gone:
            self._client.cancel([r.future for r in gone], force=True)

    def check_workers(self, present: Callable[[], Iterable[str]]) -> None:
        """Every :data:`CHECK_SECONDS`: a runner whose worker is not among ``present()`` in two looks in a row ends
        (see :meth:`lost_worker`; the scheduler's event says so sooner, this look catches a missed one)."""
        now = time.monotonic()
        with self._lock:
            placed = [r.worker for r in self._runners.values() if r.worker]
        if not placed or now - self._checked < CHECK_SECONDS:
            return
        self._checked = now
        missing = set(placed) - set(present())
        for worker in missing & self._missing:  # missing from two looks in a row: one look may be torn
            self.lost_worker(worker)
        self._missing = missing

    # --- ending -------------------------------------------------------------------------------------

    def retire(self, now: bool = False) -> list[Future]:
        """Tell every runner to end (``now``: after its running trial, handing back the rest; else once its inbox
        is empty) and start no more; the runners' futures."""
        with self._lock:
            self.retired = True
            runners = list(self._runners.values())
        sent = [self._mail.retire(r.key, r.worker, now) for r in runners if r.worker]
        if now:
            seconds = way_out.left(RETIRE_TIMEOUT)
            if concurrent.futures.wait(sent, timeout=seconds).not_done:
                way_out.ran_out("the slot runners did not all take the stop", seconds, "leaving them to their workers")
        return [r.future for r in runners]

    def take_waiting(self) -> list[Placement]:
        """The trials still waiting for a runner (a retired pool hands them to the task path)."""
        with self._lock:
            waiting, self._waiting = list(self._waiting), collections.deque()
            self._held.clear()
            return waiting


def _unfinished(runner: Runner, why: str) -> Outcome:
    """The outcome of a trial that started on ``runner`` and whose own outcome never came."""
    if runner.lost:
        return Outcome(TrialStatus.LOST, error=runner.lost)
    if why.startswith("cancelled"):
        return Outcome(TrialStatus.CANCELLED, error=why)
    return Outcome(TrialStatus.LOST, error=why or "its runner ended without its outcome")


def _result(future: Future) -> tuple[dict[str, Any] | None, str]:
    """An ended runner's result, or why it has none (``cancelled: ...``, or its worker was lost)."""
    if future.cancelled():
        return None, "cancelled: its worker was restarted"
    try:
        return future.result(timeout=RESULT_TIMEOUT), ""
    except Exception as exc:  # noqa: BLE001 - KilledWorker, comm errors: the runner's worker is gone
        return None, f"its worker was lost ({type(exc).__name__}: {exc})".splitlines()[0]
