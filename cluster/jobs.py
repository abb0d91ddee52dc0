"""A batch-job cluster's jobs kept at their count: ended jobs replaced, refused submissions shown, failures capped.

dask-jobqueue submits the jobs a cluster is scaled to and cancels them at its end, but a job that ends on its
own (its walltime, an ``scancel``, a node failure) is forgotten: Dask drops the job and keeps its place in the
plan, so with ``minimum_jobs = maximum_jobs`` nothing is submitted again and the campaign waits with fewer
workers, or none. A submission the batch system refuses (a partition that does not exist, more memory than any
node has) raised inside Dask's event loop, where no one saw it.

:class:`JobKeeper` watches the jobs from a thread of its own: every :data:`POLL_SECONDS` it asks the batch
system (SLURM: ``squeue``) how each job stands, says in one line (terminal and ``campaign.log``) when one ended
and why, and submits another in its place. A refused submission is one line with the batch system's own
message; :data:`MAX_FAILED_SUBMISSIONS` failures in a row (refused, or ended before its worker joined) stop
the submissions. It records each running job's walltime end (:func:`job_expired` reads it), so that a trial
cut by its job's walltime is told apart from one whose worker failed.

With ``minimum_jobs < maximum_jobs`` it also scales the jobs to the campaign's demand, which the controller
leaves on the scheduler (:data:`DEMAND_KEY`: the slots its running and waiting trials could use; the controller
keeps its waiting trials itself, so Dask's own adaptive scaling never sees them): more jobs, up to
``maximum_jobs``, while trials wait; a job none of whose workers runs anything is released, down to
``minimum_jobs``, once the demand fits in fewer jobs (two looks in a row: from the first, its workers count as at
their walltime's end, so that no trial is given to them meanwhile).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import ipaddress
import logging
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from . import way_out

if TYPE_CHECKING:
    from distributed import Client

__all__ = [
    "CANCEL_SECONDS",
    "DEMAND_KEY",
    "JobKeeper",
    "JobState",
    "MAX_FAILED_SUBMISSIONS",
    "POLL_SECONDS",
    "job_deadlines",
    "job_expired",
    "refusal_text",
    "slurm_nodes_elsewhere",
    "slurm_states",
]

log = logging.getLogger(__name__)

POLL_SECONDS = 2.0
STARTING_POLL_SECONDS = 0.25  # until the first worker joins: a refused submission is shown within a second
MAX_FAILED_SUBMISSIONS = 3
#: At the end (Ctrl-C included): how long the jobs' cancel commands and their workers' leaving may take, in all.
CANCEL_SECONDS = 20.0
JOB_NAME = "hypersweep-worker"  # every job's name (cluster.jobqueue_backend)

#: A worker lost this close to its job's walltime end (or later) was ended by the walltime, not by a fault.
WALLTIME_SLACK = 5.0
#: Where the keeper leaves each worker's walltime end on the scheduler (``Client.get_metadata``).
DEADLINES_KEY = ("hypersweep", "job-deadlines")
#: Where the controller leaves the slots it could use now (``cluster.executor.DaskExecutor.want``).
DEMAND_KEY = ("hypersweep", "slots-wanted")
#: SLURM job states in which the job still holds (or waits for) its node.
SLURM_ALIVE = frozenset(
    {"PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD", "RESIZING", "SIGNALING"}
)
_WHY = {
    "TIMEOUT": "its walltime",
    "CANCELLED": "cancelled",
    "NODE_FAIL": "its node failed",
    "OUT_OF_MEMORY": "out of memory",
    "PREEMPTED": "preempted",
    "BOOT_FAIL": "its node did not boot",
    "DEADLINE": "its deadline",
}

#: SLURM's reason on a COMPLETING job -> the state it ends in.
_COMPLETING_AS = {"TimeLimit": "TIMEOUT"}


@dataclasses.dataclass(frozen=True)
class JobState:
    """One job as the batch system shows it: ``state`` (``RUNNING``, ``TIMEOUT``, ...), ``end`` (epoch seconds
    when a running job's walltime ends; None when unknown) and SLURM's ``reason``."""

    job_id: str
    state: str
    end: float | None = None
    reason: str = ""

    @property
    def alive(self) -> bool:
        return self.state in SLURM_ALIVE

    def why(self) -> str:
        """How the job ended, in words. A job seen COMPLETING (its processes being ended) is named by what ends it:
        SLURM's reason ``TimeLimit`` there is its walltime, shown as the TIMEOUT it becomes a moment later."""
        state = _COMPLETING_AS.get(self.reason, self.state) if self.state == "COMPLETING" else self.state
        words = _WHY.get(state, "")
        return f"{state}, {words}" if words else state


def slurm_states(job_ids: list[str], timeout: float = 20.0) -> dict[str, JobState] | None:
    """How SLURM shows ``job_ids`` (a job it no longer knows is left out); None when ``squeue`` did not answer."""
    if not job_ids:
        return {}
    command = ["squeue", "-h", "-t", "all", "-j", ",".join(job_ids), "-o", "%i|%T|%e|%r"]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        # Every job it was asked about is gone from its memory (MinJobAge after the end): that is an answer too.
        return {} if "Invalid job id" in proc.stderr else None
    states = {}
    for line in proc.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4:
            job_id, state, end, reason = parts
            states[job_id] = JobState(job_id, state.strip(), _epoch(end), reason.strip())
    return states


def slurm_nodes_elsewhere(partition: str = "", timeout: float = 20.0) -> list[str] | None:
    """The nodes of ``partition`` (every partition's, without one) that are not this host, as ``name (address)``;
    None when ``sinfo`` did not answer. A node is this host when its address is loopback or this host's name."""
    command = ["sinfo", "-h", "-N", "-o", "%N|%o", *(["-p", partition] if partition else [])]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    here = {"localhost", socket.gethostname(), socket.getfqdn(), socket.gethostname().split(".")[0]}
    elsewhere = []
    for line in proc.stdout.splitlines():
        name, _, address = line.strip().partition("|")
        if address not in here and not _loopback(address):
            elsewhere.append(f"{name} ({address})")
    return sorted(set(elsewhere))


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _epoch(text: str) -> float | None:
    try:
        return datetime.datetime.fromisoformat(text.strip()).timestamp()  # squeue prints local time
    except ValueError:
        return None  # N/A, Unknown


def refusal_text(exc: BaseException) -> str:
    """The submit command's own message from jobqueue's error (its stderr, else stdout), in one line."""
    text = str(exc)
    for marker in ("stderr:\n", "stdout:\n"):
        if marker in text:
            lines = [line.strip() for line in text.split(marker, 1)[1].splitlines() if line.strip()]
            if lines:
                return "; ".join(lines)
    return " ".join(text.split())


def job_deadlines(client: Client, timeout: float = 5.0) -> dict[str, float]:
    """Each worker's batch-job walltime end (epoch seconds) by address, as a :class:`JobKeeper` recorded them on
    the scheduler; empty on any other cluster, or when the scheduler does not answer."""
    try:
        deadlines = client.sync(
            client.scheduler.get_metadata, keys=list(DEADLINES_KEY), default={}, callback_timeout=timeout
        )
    except Exception:  # noqa: BLE001 - no answer: nothing known
        return {}
    return {str(k): float(v) for k, v in deadlines.items()} if isinstance(deadlines, dict) else {}


def job_expired(client: Client, worker: str, timeout: float = 5.0) -> bool:
    """Whether ``worker`` (an address) ran in a batch job whose walltime has ended by now: the keeper of that
    cluster recorded the end. False on any other cluster, or when the scheduler does not answer."""
    end = job_deadlines(client, timeout).get(worker) if worker else None
    return end is not None and time.time() >= end - WALLTIME_SLACK


def _notify(line: str) -> None:
    """One line on the terminal and in campaign.log (the ``cluster`` logger's file while a campaign runs)."""
    log.warning(line)
    erase = "\r\x1b[2K" if sys.stderr.isatty() else ""  # over a progress line being drawn, not after it
    print(f"{erase}hypersweep: {line}", file=sys.stderr, flush=True)


class JobKeeper:
    """Keeps a dask-jobqueue cluster's jobs at their count (see the module's docstring).

    ``states``: the batch system's view of job ids (:func:`slurm_states`); None where the system has no query
    here (PBS): then only what Dask sees is acted on (a worker that left, a refused submission). ``scale``:
    ``(minimum_jobs, maximum_jobs, slots per job)`` to scale the jobs to the demand; None keeps their count.
    """

    def __init__(
        self,
        cluster: Any,
        system: str,
        states: Callable[[list[str]], dict[str, JobState] | None] | None = None,
        notify: Callable[[str], None] = _notify,
        poll: float = POLL_SECONDS,
        scale: tuple[int, int, int] | None = None,
    ) -> None:
        self._cluster = cluster
        self._scale = scale
        self.system = system.upper()
        self._states = states
        self._notify = notify
        self._poll = poll
        self.failures = 0  # in a row: refused, or ended before its worker joined
        self.refusal = ""  # the first refused submission's message
        self.stopped = ""  # why submissions stopped ("" while they go on)
        self.joined_once = False
        self._joined: dict[str, set[str]] = {}  # each job whose worker joined, by name: its workers' addresses
        self._deadlines: dict[str, float] = {}
        self._releasing: set[str] = set()  # idle jobs to release at the next look, their walltime end set to now
        self._joins: list[tuple[str, str]] = []  # (worker name, address) as they join, appended on the loop
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the thread --------------------------------------------------------------------------------

    def start(self) -> JobKeeper:
        self._on_loop(self._watch_joins())
        self._thread = threading.Thread(target=self._run, name="hypersweep-job-keeper", daemon=True)
        self._thread.start()
        return self

    def close(self, timeout: float = 30.0) -> None:
        """Stop watching (before the cluster closes and cancels its jobs: those ends are not replaced); wait up to
        ``timeout`` s for a look under way (a look that ends after it acts on nothing)."""
        self._halt.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout)

    def cancel_all(self, timeout: float | None = None) -> None:
        """Cancel every job while the scheduler still runs, and wait for their workers to leave: each worker then
        ends on the batch system's SIGTERM, its log saying so, with no traceback (closed by the scheduler's own end
        first, its heartbeat and comms fail loudly). All of it within ``timeout`` s, Ctrl-C or not: a job whose
        cancel command has not answered by then is named, with the command that cancels it. Never raises.
        ``timeout``: :data:`CANCEL_SECONDS`, or what is left of the way out (:mod:`cluster.way_out`)."""
        timeout = way_out.left(CANCEL_SECONDS) if timeout is None else timeout
        deadline = time.monotonic() + timeout
        self.close(timeout=timeout / 4)  # a look under way (squeue, a submission) waits no longer than this
        unconfirmed = self._cancel_within(deadline)
        if unconfirmed is not None:
            self._notify(self._unconfirmed(unconfirmed, timeout))
            return
        while self._cluster.scheduler_info.get("workers") and time.monotonic() < deadline:
            time.sleep(0.1)  # the cancelled jobs' workers leaving

    def _unconfirmed(self, job_ids: list[str], timeout: float) -> str:
        """The line for jobs whose cancel was not confirmed within ``timeout`` s: which, and what to run."""
        slurm = self.system == "SLURM"
        if not job_ids:
            listing = f"squeue --name {JOB_NAME}" if slurm else "qstat"
            return (
                f"the cancel of the {self.system} jobs did not run within {timeout:g}s: look for them with '{listing}'"
            )
        cancel = f"{'scancel' if slurm else 'qdel'} {' '.join(job_ids)}"
        return (
            f"{self.system} did not confirm the cancel of job(s) {', '.join(job_ids)} within {timeout:g}s: "
            f"if still queued, cancel them with '{cancel}'"
        )

    def _cancel_within(self, deadline: float) -> list[str] | None:
        """Run every job's cancel command until ``deadline``; None once each ended, else the ids of the jobs whose
        command had not (empty: the event loop never ran the cancel)."""
        pending: dict[str, bool] = {}  # job id -> its command ended; written on the loop
        cancel = self._cancel(pending)
        try:
            future = asyncio.run_coroutine_threadsafe(cancel, self._cluster.loop.asyncio_loop)
        except RuntimeError:  # the loop is closed
            cancel.close()
            return []
        try:
            future.result(timeout=max(0.0, deadline - time.monotonic()))
            return None
        except Exception as exc:  # noqa: BLE001 - past the deadline, or the loop is gone: the jobs are named
            log.debug("cancelling the %s jobs: %r", self.system, exc)
            future.cancel()
            return sorted(job_id for job_id, ended in list(pending.items()) if not ended)

    async def _cancel(self, pending: dict[str, bool]) -> None:
        """Cancel every submitted job; ``pending``: each job's id, and whether its cancel command ended."""
        jobs = [job for job in self._cluster.workers.values() if getattr(job, "job_id", None)]
        pending.update({str(job.job_id): False for job in jobs})

        async def cancel(job: Any) -> None:
            await job.close()
            pending[str(job.job_id)] = True

        await asyncio.gather(*(cancel(job) for job in jobs), return_exceptions=True)

    def _run(self) -> None:
        while not self._halt.is_set():
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - a bad tick must not end the watch; the next one tries again
                log.exception("checking the %s jobs failed", self.system)
            self._halt.wait(self._poll if self.joined_once else min(self._poll, STARTING_POLL_SECONDS))

    # --- one look ------------------------------------------------------------------------------------

    def tick(self) -> None:
        """Look at every job once: replace the ended ones, record the refused ones and the running ones' ends."""
        jobs, joins = self._on_loop(self._snapshot())
        for worker, address in joins:
            self._on_joined([name for name in jobs if _of_job(worker, name)], address)
        ids = [job_id for job_id, _ in jobs.values() if job_id]
        states = self._states(ids) if self._states is not None else None
        if self._halt.is_set():
            return
        ended: dict[str, str] = {}  # job name -> why
        for name, (job_id, refusal) in jobs.items():
            state = states.get(job_id) if states is not None and job_id else None
            if state is not None and state.end is not None and name not in self._releasing:
                for address in self._joined.get(name, ()):
                    self._deadlines[address] = state.end
            if refusal:
                ended[name] = self._refused(refusal)
            elif job_id and states is not None and (state is None or not state.alive):
                ended[name] = self._ended(name, job_id, state)
        self._on_loop(self._replace(ended))
        if self._scale is not None and not self._halt.is_set():
            self._on_loop(self._follow_demand(*self._scale))

    def _on_joined(self, names: list[str], address: str) -> None:
        for name in names:
            self._joined.setdefault(name, set()).add(address)
            self.joined_once = True
            self.failures = 0

    def _refused(self, refusal: str) -> str:
        self.failures += 1
        if not self.joined_once and not self.refusal:
            self.refusal = refusal  # before any worker joined: opening the cluster fails with it, in one line
        elif self.joined_once:
            self._notify(f"{self.system} refused a job: {refusal}")
        return "refused"

    def _ended(self, name: str, job_id: str, state: JobState | None) -> str:
        why = state.why() if state is not None else "gone from the queue"
        if name not in self._joined:
            self.failures += 1
            why += ", before its worker joined"
        self._joined.pop(name, None)
        return f"{self.system} job {job_id} ended ({why})"

    # --- on the cluster's event loop -----------------------------------------------------------------

    def _on_loop(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        loop = self._cluster.loop.asyncio_loop
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(timeout=120)

    async def _watch_joins(self) -> None:
        """Every worker that joins the scheduler (in this process), by name and address: a worker that joins and
        leaves between two looks still counts as joined."""
        from distributed.diagnostics.plugin import SchedulerPlugin

        joins = self._joins

        class Joins(SchedulerPlugin):
            name = "hypersweep-job-joins"

            def add_worker(self, scheduler: Any, worker: str) -> None:
                state = scheduler.workers.get(worker)
                if state is not None:
                    joins.append((str(state.name), worker))

        self._cluster.scheduler.add_plugin(Joins(), name=Joins.name)

    async def _snapshot(self) -> tuple[dict[str, tuple[str, str]], list[tuple[str, str]]]:
        """Each job by name: its id and refusal; the workers that joined since the last look (name, address)."""
        jobs = {
            name: (str(job.job_id or ""), str(getattr(job, "refusal", "")))
            for name, job in self._cluster.workers.items()
        }
        joins, self._joins[:] = list(self._joins), []
        return jobs, joins

    async def _replace(self, ended: Mapping[str, str]) -> None:
        """Forget the ended jobs and submit others in their places, unless submissions stopped; record the ends.

        A replacement takes a new name: 15 s after a worker left, Dask itself cancels the job of that name unless
        a worker of that name is back, and a replacement still in the queue then would be cancelled."""
        places: dict[str, str] = {}  # an ended job's name -> the name of the place made for its replacement
        for name in list(ended):
            job = self._cluster.workers.pop(name, None)
            if job is not None:
                await job.close()  # nothing to cancel, most often; Dask checks that each job it made closed
            if self._cluster.worker_spec.pop(name, None) is None:  # Dask took it out of the plan (scaled down)
                ended = {n: line for n, line in ended.items() if n != name}
                continue
            place = self._cluster.new_worker_spec()
            self._cluster.worker_spec.update(place)
            places[name] = next(iter(place))
        await self._record_deadlines()
        missing = set(self._cluster.worker_spec) - set(self._cluster.workers)
        if not missing or self._halt.is_set() or self._cluster.status.name in ("closing", "closed"):
            self._tell(ended)
            return
        if self.failures >= MAX_FAILED_SUBMISSIONS:
            self._stop_submitting(ended)
            return
        await self._cluster._correct_state()  # Dask's own: a job for each place in the plan without one
        replacements = {name: self._cluster.workers.get(place) for name, place in places.items()}
        self._tell(ended, {name: str(job.job_id) for name, job in replacements.items() if job and job.job_id})

    def _tell(self, ended: Mapping[str, str], replacements: Mapping[str, str] | None = None) -> None:
        for name, line in ended.items():
            if line != "refused":
                new = (replacements or {}).get(name)
                self._notify(f"{line}; job {new} submitted in its place" if new else line)

    def _stop_submitting(self, ended: Mapping[str, str]) -> None:
        """No more submissions: the places left without a job leave the plan (Dask would fill them again)."""
        for name in set(self._cluster.worker_spec) - set(self._cluster.workers):
            del self._cluster.worker_spec[name]
        self._tell(ended)
        if not self.stopped:
            self.stopped = (
                f"{self.failures} {self.system} jobs in a row were refused or ended before their worker joined"
            )
            if self.joined_once:  # before, opening the cluster fails with it
                self._notify(
                    f"{self.stopped}: no more are submitted (check the job logs and [cluster.{self.system.lower()}])"
                )

    async def _follow_demand(self, minimum: int, maximum: int, per_job: int) -> None:
        """As many jobs as the demand's slots fill, within ``minimum..maximum``: more submitted, or idle ones
        released (those whose worker has not joined first, then those whose workers run nothing)."""
        demand = self._cluster.scheduler.get_metadata(keys=list(DEMAND_KEY), default=None)
        if not isinstance(demand, dict) or self.stopped or self._cluster.status.name in ("closing", "closed"):
            return
        target = min(maximum, max(minimum, -(-int(demand["slots"]) // max(1, per_job))))
        planned = len(self._cluster.worker_spec)
        marked, self._releasing = self._releasing, set()
        if target > planned:
            for _ in range(target - planned):
                self._cluster.worker_spec.update(self._cluster.new_worker_spec())
            before = set(self._cluster.workers)
            await self._cluster._correct_state()
            new = [str(job.job_id) for name, job in self._cluster.workers.items() if name not in before and job.job_id]
            if new:
                self._notify(f"{len(new)} more {self.system} job(s) submitted for waiting trials: {', '.join(new)}")
        elif target < planned:
            idle = self._idle_jobs(set(demand.get("busy", ())))[: planned - target]
            now = [name for name in idle if name in marked or name not in self._joined]
            for name in now:
                await self._release(name)
            await self._mark_ending({name for name in idle if name not in now})

    async def _mark_ending(self, names: set[str]) -> None:
        """Jobs to release at the next look, if still idle then: their workers' walltime ends are set to now, so
        that no trial is given to them meanwhile (``Walltimes``), and one cut by the release spends no retry."""
        self._releasing = names
        for name in names:
            for address in self._joined.get(name, ()):
                self._deadlines[address] = time.time()
        if names:
            await self._record_deadlines()

    def _idle_jobs(self, busy: set[str]) -> list[str]:
        """The planned jobs that run nothing: not joined yet first, then those none of whose workers is ``busy``
        (a slot runner holding a trial there) or runs a task other than an idle slot runner."""
        by_name = {str(ws.name): ws for ws in self._cluster.scheduler.workers.values()}
        waiting, idle = [], []
        for name in self._cluster.worker_spec:
            workers = [ws for worker, ws in by_name.items() if _of_job(worker, name)]
            if not workers:
                waiting.append(name)
            elif not any(ws.address in busy or _runs_a_trial_task(ws) for ws in workers):
                idle.append(name)
        return waiting + idle

    async def _release(self, name: str) -> None:
        """Cancel the job ``name`` and take it out of the plan (not replaced); say so."""
        self._cluster.worker_spec.pop(name, None)
        job = self._cluster.workers.pop(name, None)
        self._joined.pop(name, None)
        if job is None:
            return
        await job.close()
        if job.job_id:
            self._notify(f"{self.system} job {job.job_id} released: no trial waits for its slots")

    async def _record_deadlines(self) -> None:
        if self._deadlines:
            self._cluster.scheduler.set_metadata(keys=list(DEADLINES_KEY), value=dict(self._deadlines))


def _runs_a_trial_task(worker: Any) -> bool:
    """Whether the scheduler's ``worker`` runs a task that is not a slot runner (``cluster.slot_runner.runner_key``
    names those ``<topic>-runner-<n>``): a trial of its own, or a part of one."""
    return any("-runner-" not in str(ts.key) for ts in worker.processing)


def _of_job(worker: str, job: str) -> bool:
    """Whether the worker named ``worker`` runs in the job named ``job`` (jobqueue: the job's name, or with
    several workers per job the job's name, ``-`` and the worker's index)."""
    return worker == job or worker.startswith(f"{job}-") and worker[len(job) + 1 :].isdigit()
