"""``[cluster] backend = "slurm"`` or ``"pbs"``: workers as batch jobs, one per node, through dask-jobqueue.

The scheduler runs here; each job runs one node's worker(s), shaped as :func:`~cluster.worker_shape.worker_args`
says. The jobs are kept at their count by :class:`~cluster.jobs.JobKeeper`; ``job_script`` prints what a job runs,
exactly as jobqueue would submit it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, cast

from .deployed import Deployed, import_extra
from .errors import ClusterError, InvalidSetting, SettingError, SubmissionRefused
from .jobs import JOB_NAME, JobKeeper, refusal_text, slurm_nodes_elsewhere, slurm_states
from .no_http import NO_HTTP_ROUTES
from .options import ClusterOptions, is_loopback
from .quiet_workers import silence_logs
from .way_out import close_within, left
from .worker_shape import worker_args

if TYPE_CHECKING:  # distributed loads when a cluster is opened, not when a light command reads a spec
    from distributed import Client

__all__ = ["JOBQUEUE_SYSTEMS", "JOB_LOG_LEVEL", "SCHEDULER_PLACEHOLDER", "JobQueueBackend", "job_script"]

JOBQUEUE_SYSTEMS = ("slurm", "pbs")
# In a printed job script the scheduler's port is only known once it has started.
SCHEDULER_PLACEHOLDER = "<port>"
#: The first line of every job script after its directives: the job's log at Dask's INFO level.
JOB_LOG_LEVEL = "export DASK_LOGGING__DISTRIBUTED=info"
_MEMORY = re.compile(r"^\s*\d+(\.\d+)?\s*([kKmMgGtTpP]i?)?[bB]?\s*$")
_WALLTIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")
log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class JobQueueBackend(Deployed):
    """Workers as SLURM or PBS batch jobs, one job per node, scaled between a minimum and a maximum.

    ``gpus_per_job`` > 0: the job asks for that many GPUs and its single worker owns them as
    ``GPU``; otherwise each of the job's ``processes`` workers owns ``cores // processes`` CPU slots.
    """

    extra: ClassVar[str] = "dask_jobqueue"
    summary: ClassVar[str] = "workers as {kind} batch jobs, one per node, through dask-jobqueue ([cluster.{kind}])"

    system: str
    walltime: str
    cores: int
    memory: str
    queue: str = ""
    account: str = ""
    gpus_per_job: int = 0
    processes: int = 1
    minimum_jobs: int = 1
    maximum_jobs: int = 1
    job_extra_directives: tuple[str, ...] = ()
    job_script_prologue: tuple[str, ...] = ()
    resource_spec: str = ""  # PBS only: replaces the computed "select=..." line
    start_timeout: float = 3600.0  # seconds to wait for the first worker to join

    def __post_init__(self) -> None:
        if self.system not in JOBQUEUE_SYSTEMS:
            raise InvalidSetting("system", f"system={self.system!r}: must be one of {', '.join(JOBQUEUE_SYSTEMS)}")
        if not _WALLTIME.match(self.walltime):
            raise InvalidSetting("walltime", f"walltime={self.walltime!r}: must look like HH:MM:SS (or D-HH:MM:SS)")
        if not _MEMORY.match(self.memory):
            raise InvalidSetting("memory", f"memory={self.memory!r}: must be a size such as '64GB' or '32GiB'")
        for name in ("cores", "processes", "maximum_jobs"):
            if getattr(self, name) < 1:
                raise InvalidSetting(name, f"{name}={getattr(self, name)!r}: must be >= 1")
        if self.gpus_per_job < 0 or self.minimum_jobs < 0:
            raise InvalidSetting(
                "gpus_per_job" if self.gpus_per_job < 0 else "minimum_jobs",
                f"gpus_per_job={self.gpus_per_job!r}, minimum_jobs={self.minimum_jobs!r}: must be >= 0",
            )
        if self.maximum_jobs < self.minimum_jobs:
            raise InvalidSetting(
                "maximum_jobs", f"maximum_jobs={self.maximum_jobs!r}: must be >= minimum_jobs={self.minimum_jobs!r}"
            )
        if self.processes > self.cores:
            raise InvalidSetting("processes", f"processes={self.processes!r}: must be <= cores={self.cores!r}")
        if self.gpus_per_job and self.processes != 1:
            raise InvalidSetting(
                "processes",
                f"processes={self.processes!r}: must be 1 with gpus_per_job > 0 (one worker owns the node's GPUs)",
            )
        if self.resource_spec and self.system != "pbs":
            raise InvalidSetting("resource_spec", "resource_spec: PBS only")
        if self.start_timeout <= 0:
            raise InvalidSetting("start_timeout", f"start_timeout={self.start_timeout!r}: must be > 0")

    @property
    def kind(self) -> str:
        return self.system

    @property
    def slots(self) -> int:
        """Slots each worker owns: its GPUs, else its share of the job's cores."""
        return self.gpus_per_job or self.cores // self.processes

    @property
    def adaptive(self) -> bool:
        return self.maximum_jobs > self.minimum_jobs

    @property
    def follows_demand(self) -> bool:
        return self.adaptive

    def describe(self, options: ClusterOptions) -> str:
        jobs = f"{self.minimum_jobs}..{self.maximum_jobs} (adaptive)" if self.adaptive else str(self.maximum_jobs)
        queue = f" on queue {self.queue!r}" if self.queue else ""
        owns = worker_args(self.gpus_per_job, self.slots)[3]
        return (
            f"{self.system.upper()} jobs{queue}: {jobs} x ({self.cores} cores, {self.memory}, walltime "
            f"{self.walltime}), {self.processes} worker(s) per job owning {owns}; scheduler on {options.host}"
        )

    def submission(self, options: ClusterOptions) -> str:
        """The batch script one job runs, exactly as jobqueue would submit it (the port a placeholder)."""
        self.require()
        return job_script(options)

    def _start(self, options: ClusterOptions) -> Any:
        return _jobqueue_cluster(options)

    @contextlib.contextmanager
    def open(self, options: ClusterOptions, *, env: Mapping[str, str] | None = None) -> Iterator[Client]:
        """Start the scheduler, submit the jobs and keep them at their count (:class:`~cluster.jobs.JobKeeper`);
        a refused submission is exit 2 with the batch system's message, at once; cancel every job on exit."""
        self.require()
        self._check_loopback(options)
        cluster = self._start(options)
        states = slurm_states if self.system == "slurm" else None
        scale = (self.minimum_jobs, self.maximum_jobs, self.slots * self.processes) if self.adaptive else None
        keeper = JobKeeper(cluster, self.system, states=states, scale=scale)
        try:
            self._grow(cluster)
            keeper.start()
            from distributed import Client

            client = Client(cluster, timeout=options.connect_timeout, security=options.security())
            try:
                self._wait_for_first_job(client, keeper, options.job_logs)
                yield client
            finally:
                keeper.cancel_all()  # first, and not replaced: each worker leaves on SIGTERM, its log clean
                close_within(client, 10, f"the Dask client of the {self.system.upper()} cluster did not close")
        finally:
            keeper.close(timeout=left(5))  # cancel_all stopped it already, unless the client never connected
            close_within(cluster, 30, f"the {self.system.upper()} cluster did not close")

    def _check_loopback(self, options: ClusterOptions) -> None:
        """A scheduler on loopback serves only jobs that run on this host: every node of the partition must be
        this host (single-host SLURM: a workstation, CI)."""
        if not is_loopback(options.host):
            return
        if self.system != "slurm":
            raise SettingError(
                f"listen = {options.host!r} is loopback, but {self.system} workers run on other nodes: listen on this "
                "host's address they can reach (with TLS files, or --insecure)"
            )
        where = f"partition {self.queue!r}" if self.queue else "SLURM"
        elsewhere = slurm_nodes_elsewhere(self.queue)
        if elsewhere is None:
            raise ClusterError(f"cannot list the nodes of {where} (sinfo) to check that listen = {options.host!r} fits")
        if elsewhere:
            raise SettingError(
                f"listen = {options.host!r} is loopback, but {where} has nodes on other hosts "
                f"({', '.join(elsewhere[:3])}{', ...' if len(elsewhere) > 3 else ''}): listen on this host's address "
                "they can reach (with TLS files, or --insecure)"
            )

    def _wait_for_first_job(self, client: Client, keeper: JobKeeper, job_logs: str) -> None:
        """Return once a worker joined; a refused submission, or submissions stopped, or ``start_timeout``: raise."""
        import time

        deadline = time.monotonic() + self.start_timeout
        while True:
            try:
                client.wait_for_workers(1, timeout=0.5)
                return
            except TimeoutError:
                pass
            if keeper.refusal and not keeper.joined_once:
                raise SubmissionRefused(f"{self.system.upper()} refused the job: {keeper.refusal}")
            if keeper.stopped:
                raise ClusterError(f"{keeper.stopped}: check {job_log_files(self.system, job_logs)}")
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"no worker joined within {self.start_timeout:g}s (start_timeout): check the queue "
                    f"({'squeue' if self.system == 'slurm' else 'qstat'}) and the job logs"
                )

    def _grow(self, cluster: Any) -> None:
        # Not Dask's Adaptive: it grows only when tasks wait at the scheduler, and the controller keeps its waiting
        # trials itself. Adaptive, the keeper scales the jobs to the demand the controller leaves (cluster.jobs);
        # at least one to start with, for the first worker to join.
        cluster.scale(jobs=max(1, self.minimum_jobs) if self.adaptive else self.maximum_jobs)


def job_log_files(system: str, job_logs: str) -> str:
    """Where a job's log is, in words: in ``job_logs`` (the campaign's ``jobs/``), or where the batch system puts it."""
    if system == "slurm":
        return f"{job_logs or 'the folder run was started in'}/slurm-<job id>.out"
    return f"the job logs in {job_logs}" if job_logs else "the job logs"


def _slurm_kwargs(backend: JobQueueBackend, job_logs: str) -> dict[str, Any]:
    directives = list(backend.job_extra_directives)
    gpus = backend.gpus_per_job
    if gpus and not any(re.search(r"--(gres|gpus)", d) for d in directives):
        directives.append(f"--gres=gpu:{gpus}")
    # stdout and stderr in one file, as sbatch's default, in the campaign's folder (unless the user's own --output)
    if job_logs and not any(re.match(r"\s*(-o|--output)\b", d) for d in directives):
        directives.append(f"--output={job_logs}/slurm-%j.out")
    return {"job_extra_directives": directives}


def _pbs_kwargs(backend: JobQueueBackend, job_logs: str) -> dict[str, Any]:
    return {
        "resource_spec": backend.resource_spec or _pbs_select(backend),
        "job_extra_directives": list(backend.job_extra_directives),
        **({"log_directory": job_logs} if job_logs else {}),  # jobqueue's #PBS -o and -e
    }


def _pbs_select(backend: JobQueueBackend) -> str:
    from dask.utils import parse_bytes
    from dask_jobqueue.pbs import pbs_format_bytes_ceil

    gpus = f":ngpus={backend.gpus_per_job}" if backend.gpus_per_job else ""
    return f"select=1:ncpus={backend.cores}{gpus}:mem={pbs_format_bytes_ceil(parse_bytes(backend.memory))}"


# system -> (dask_jobqueue's cluster class, the keyword arguments only that system takes)
_JOB_SYSTEMS = {"slurm": ("SLURMCluster", _slurm_kwargs), "pbs": ("PBSCluster", _pbs_kwargs)}


def _cluster_class(system: str) -> type:
    jobqueue = import_extra(system, JobQueueBackend.extra)
    return getattr(jobqueue, _JOB_SYSTEMS[system][0])


@functools.cache
def _job_class(system: str) -> type:
    """jobqueue's job class with threads = the worker's slots (jobqueue's own default is cores / processes)."""
    base = cast(Any, _cluster_class(system)).job_cls  # dask-jobqueue's cluster classes carry their job class

    def __init__(self: Any, *args: Any, worker_threads: int, **kwargs: Any) -> None:
        self._worker_threads = worker_threads
        self.refusal = ""
        base.__init__(self, *args, **kwargs)

    async def start(self: Any) -> None:
        """Submit the job; a refusal (the submit command's non-zero exit) is kept as ``refusal`` for the
        :class:`~cluster.jobs.JobKeeper` to show, not raised inside Dask's event loop, where no one sees it."""
        from distributed.core import Status

        try:
            await base.start(self)
        except RuntimeError as exc:  # jobqueue's _call: the command's exit status, stdout and stderr
            self.refusal = refusal_text(exc)
            self.status = Status.running  # Dask's SpecCluster asserts a started job runs; the keeper drops it

    async def close(self: Any) -> None:
        """Cancel the job (if it was submitted) and say so: Dask's SpecCluster checks that each job it made closed."""
        from distributed.core import Status

        await base.close(self)
        self.status = Status.closed

    threads = property(lambda self: self._worker_threads, doc="One thread per slot this worker owns.")
    members = {"__init__": __init__, "start": start, "close": close, "worker_process_threads": threads}
    return type(f"OneWorkerPerNode{base.__name__}", (base,), members)


def _job_kwargs(backend: JobQueueBackend, job_logs: str = "") -> dict[str, Any]:
    """Keyword arguments for jobqueue's cluster (and job) classes; nothing from the spec passes through raw.
    ``job_logs``: the folder each job's log goes to ("": where the batch system puts it)."""
    kwargs: dict[str, Any] = {
        "cores": backend.cores,
        "memory": backend.memory,
        "processes": backend.processes,
        "walltime": backend.walltime,
        "queue": backend.queue or None,
        "account": backend.account or None,
        "worker_threads": backend.slots,
        # --nthreads: worker_threads; the preload closes the worker's plain-HTTP server (/health, /metrics)
        "worker_extra_args": [*worker_args(backend.gpus_per_job, backend.slots)[2:], "--preload", "cluster.no_http"],
        # The controller's environment (which sbatch passes on) keeps Dask quiet; a job's log shows its worker
        # starting, joining and why it left.
        "job_script_prologue": [JOB_LOG_LEVEL, *backend.job_script_prologue],
        "job_name": JOB_NAME,
    }
    if backend.job_script_prologue:  # it sets the node's environment up: its python, not this machine's venv path
        kwargs["python"] = "python"
    return {**kwargs, **_JOB_SYSTEMS[backend.system][1](backend, job_logs)}


def _network_kwargs(options: ClusterOptions) -> dict[str, Any]:
    """What jobqueue adds to every job: protocol and the workers' TLS files."""
    return {"protocol": options.protocol if options.tls else None, "security": options.security()}


def _jobqueue_backend(options: ClusterOptions) -> JobQueueBackend:
    backend = options.backend
    if not isinstance(backend, JobQueueBackend):
        raise SettingError(f"backend={backend!r}: not a SLURM/PBS backend")
    return backend


def job_script(options: ClusterOptions, scheduler_address: str | None = None) -> str:
    """The batch script one job of ``options.backend`` runs, exactly as jobqueue would submit it.

    Without ``scheduler_address`` the port is a placeholder: the scheduler picks it when it starts.
    """
    backend = _jobqueue_backend(options)
    job = _job_class(backend.system)
    address = scheduler_address or f"{options.protocol}{options.host}:{SCHEDULER_PLACEHOLDER}"
    kwargs = {**_job_kwargs(backend, options.job_logs), **_network_kwargs(options), "interface": None}
    # jobqueue's own cluster.job_script() builds this very job with the name "dummy-name".
    return job(address, name="dummy-name", config_name=backend.system, **kwargs).job_script()


def _jobqueue_cluster(options: ClusterOptions) -> Any:
    """Start jobqueue's cluster object: a scheduler here on ``options.host``; no job is submitted yet."""
    backend = _jobqueue_backend(options)
    scheduler_options: dict[str, Any] = {
        "host": options.host,
        "port": 0,
        "dashboard": options.dashboard,
        "dashboard_address": f"{options.host}:0",  # never jobqueue's default ':8787' on every interface
    }
    # Same policy as the embedded cluster: a worker lost mid-trial fails the task at once and the
    # controller retries it (max_retries) from its checkpoint; and no HTTP server unless the dashboard is asked for.
    import dask

    from .plugins import CloseSchedulerHTTP

    if not options.dashboard:
        scheduler_options["plugins"] = [CloseSchedulerHTTP()]
    if options.job_logs:  # the batch system writes into it; it does not make it
        os.makedirs(options.job_logs, exist_ok=True)
    no_http = {} if options.dashboard else NO_HTTP_ROUTES
    with dask.config.set({"distributed.scheduler.allowed-failures": 0, **no_http}):
        return _cluster_class(backend.system)(
            n_workers=0,
            job_cls=_job_class(backend.system),
            scheduler_options=scheduler_options,
            silence_logs=silence_logs(options),
            **_network_kwargs(options),
            **_job_kwargs(backend, options.job_logs),
        )
