"""Where the workers come from: one ``Backend`` class per ``[cluster] backend`` name, chosen from ``REGISTRY``.

``local``       ``LocalBackend``: an embedded ``LocalCluster`` of worker processes, sized to this machine.
``address``     ``AddressBackend``: join a running scheduler (``tcp://``, ``tls://`` or a scheduler file).
``slurm/pbs``   ``JobQueueBackend``: workers as batch jobs, through dask-jobqueue.
``kubernetes``  ``KubernetesBackend``: a DaskCluster resource for the dask-kubernetes operator.

Each backend opens itself (``open(options)`` yields a connected ``Client`` and closes what it
started), says in one line what it starts (``describe``) and shows what it would submit
(``submission``: a job script, or the DaskCluster resource) without starting anything.
Policy stays here and in plain frozen dataclasses; the mechanism is Dask's own
``LocalCluster``/``Client`` and deploy projects, the latter imported only when their backend
is used (they are optional extras).

One Dask worker per node owns that node's GPUs as the resource ``GPU=n`` and runs ``n``
threads (one per GPU it can lease); without GPUs it owns ``CPU=slots`` with one thread per slot.
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import contextlib
import dataclasses
import functools
import importlib
import logging
import os
import re
import signal
import socket
import threading
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, cast

from .errors import ClusterError, InvalidSetting, MissingExtraError, SettingError, SubmissionRefused, one_line
from .jobs import JobKeeper, refusal_text, slurm_nodes_elsewhere, slurm_states
from .options import Backend, ClusterOptions, is_loopback, scheduler_address
from .packing import MAX_TRIALS_PER_GPU
from .resources import detect_gpus

if TYPE_CHECKING:  # distributed loads when a cluster is opened, not when a light command reads a spec
    from distributed import Client, LocalCluster
    from distributed.security import Security

__all__ = [
    "AddressBackend",
    "Backend",
    "JobQueueBackend",
    "KubernetesBackend",
    "LocalBackend",
    "MissingExtraError",
    "REGISTRY",
    "SCHEDULER_PLACEHOLDER",
    "local_shape",
    "backend_named",
    "backend_of",
    "cluster_spec_dict",
    "job_script",
    "require_extra",
    "submission_text",
    "worker_args",
]

JOBQUEUE_SYSTEMS = ("slurm", "pbs")
# In a printed job script the scheduler's port is only known once it has started.
SCHEDULER_PLACEHOLDER = "<port>"
#: The first line of every job script after its directives: the job's log at Dask's INFO level.
JOB_LOG_LEVEL = "export DASK_LOGGING__DISTRIBUTED=info"
_MEMORY = re.compile(r"^\s*\d+(\.\d+)?\s*([kKmMgGtTpP]i?)?[bB]?\s*$")
_WALLTIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def worker_args(gpus: int, slots: int, trials_per_gpu: int | None = None) -> list[str]:
    """``dask worker`` flags for one worker per node: ``GPU=gpus`` (if any), else ``CPU=slots``, one thread each.

    A GPU worker's threads follow what its trials ask for: ``trials_per_gpu`` None gives it
    :data:`~cluster.packing.MAX_TRIALS_PER_GPU` threads per GPU, and Dask's ``GPU`` resource caps how many
    trials run at once (two of ``gpus = 0.5`` per GPU, one of ``gpus = 1``); an integer caps them at that many
    per GPU. Idle threads cost nothing: Dask starts them as tasks arrive."""
    if gpus < 0 or slots < 1 or (trials_per_gpu is not None and trials_per_gpu < 1):
        raise ValueError(
            f"gpus={gpus!r}, slots={slots!r}, trials_per_gpu={trials_per_gpu!r}: need gpus >= 0, "
            "slots >= 1 and trials_per_gpu >= 1 (or None: as the trials ask)"
        )
    n = gpus if gpus > 0 else slots
    per_gpu = MAX_TRIALS_PER_GPU if trials_per_gpu is None else trials_per_gpu
    threads = n * per_gpu if gpus > 0 else n
    return ["--nthreads", str(threads), "--resources", f"{'GPU' if gpus > 0 else 'CPU'}={n}"]


def install_hint(kind: str, module: str) -> str:
    """How to install what backend ``kind`` needs: the checkout's extra, or the dependency itself
    (``hypersweep`` is installed from its repository, not from a package index)."""
    distribution = module.replace("_", "-")
    return f"pip install -e '.[{kind}]' in the hypersweep checkout, or pip install {distribution}"


def _import_extra(kind: str, module: str) -> Any:
    """Import a deploy project, keeping this process's Ctrl-C: importing dask_jobqueue installs a SIGINT handler
    that calls ``sys.exit()`` (its runner module), which would end a campaign with status 0 and no resume line."""
    main = threading.current_thread() is threading.main_thread()
    sigint = signal.getsignal(signal.SIGINT) if main else None
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"backend {kind!r} needs {module.replace('_', '-')}: {install_hint(kind, module)} ({exc})"
        ) from exc
    finally:
        if main and sigint is not None and signal.getsignal(signal.SIGINT) is not sigint:
            signal.signal(signal.SIGINT, sigint)


def _silence_logs(options: ClusterOptions) -> int | bool:
    """Dask's ``silence_logs`` for a cluster started here: while it runs, Dask's own log handlers (this process's
    and its worker processes') show warnings and errors only, unless ``options.verbose``. False keeps them as they are.
    """
    return False if options.verbose else logging.WARNING


# --- no plain-HTTP servers -----------------------------------------------------------------------
#
# Every Dask scheduler and worker starts an HTTP server (health, Prometheus metrics, the scheduler's
# JSON API, which can retire workers) in plain HTTP, even when its cluster talks TLS. Unless the user
# asks for the dashboard, the embedded cluster serves no routes and closes those servers as soon as
# each scheduler or worker starts, before a worker registers: nothing but the TLS ports listens.

#: Dask config (and, for processes started here, environment) that serves no HTTP routes.
NO_HTTP_ROUTES: dict[str, list[str]] = {"distributed.scheduler.http.routes": [], "distributed.worker.http.routes": []}
NO_HTTP_ENV = {"DASK_DISTRIBUTED__SCHEDULER__HTTP__ROUTES": "[]", "DASK_DISTRIBUTED__WORKER__HTTP__ROUTES": "[]"}


# --- the embedded cluster ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LocalBackend(Backend):
    """An embedded ``LocalCluster`` of worker processes on this machine: the default.

    ``options.n_workers`` workers (default: one owning all GPUs if there are any, else one per CPU
    core), each owning ``GPU`` (its share of the GPUs) or ``options.slots_per_worker`` ``CPU`` slots.

    Mutual TLS: with ``options.tls`` those files, else a certificate and key made for this cluster
    alone (Dask's ``Security.temporary``), held in memory by this process and handed to the worker
    processes it starts, never written to the campaign folder; only they can connect, so another user
    of this machine who reads the scheduler's address cannot. Plain TCP only where the user asked for
    it (``insecure`` on a non-loopback ``host`` without TLS files: workers elsewhere, with no key, may
    join). No HTTP server (dashboard, metrics, health) unless ``options.dashboard``.
    """

    kind: ClassVar[str] = "local"
    summary: ClassVar[str] = "an embedded LocalCluster of worker processes on this machine (the default)"

    def describe(self, options: ClusterOptions) -> str:
        n_workers, resources = local_shape(options)
        owned = ", ".join(f"{name}={amount:g}" for name, amount in resources.items())
        keys = (
            "the given TLS files"
            if options.tls
            else "plain TCP (--insecure)"
            if options.plain_local_cluster()
            else "TLS with a certificate made for it"
        )
        return (
            f"an embedded LocalCluster on {options.host} ({keys}): {n_workers} worker process(es), each owning {owned}"
        )

    @contextlib.contextmanager
    def open(self, options: ClusterOptions, *, env: Mapping[str, str] | None = None) -> Iterator[Client]:
        n_workers, resources = local_shape(options)
        threads = int(sum(resources.values())) * (options.trials_per_gpu if "GPU" in resources else 1)
        from distributed import Client
        from distributed.security import Security

        security = options.security() or (Security() if options.plain_local_cluster() else _temporary_security())
        # A worker that dies mid-trial fails the task at once: the controller retries it
        # (max_retries) from its checkpoint, rather than Dask retrying it silently.
        settings: dict[str, Any] = {"distributed.scheduler.allowed-failures": 0}
        import dask

        with dask.config.set({**settings, **({} if options.dashboard else NO_HTTP_ROUTES)}):
            cluster = _local_cluster(options, n_workers, threads, resources, env, security)
        from .revive import REVIVE_AFTER, reviving

        try:
            client = Client(cluster, timeout=options.connect_timeout, security=security)
            try:
                # a worker its nanny does not start again is started anew, well before worker_timeout ends the run
                with reviving(cluster, after=min(REVIVE_AFTER, options.worker_timeout / 2)):
                    yield client
            finally:
                client.close(timeout=10)
        finally:
            cluster.close(timeout=20)


def _temporary_security() -> Security:
    """Mutual TLS with a key and self-signed certificate made now, for this cluster alone (in memory)."""
    from distributed.security import Security

    try:
        return Security.temporary()
    except ImportError as exc:
        raise ClusterError(
            f"the embedded cluster's TLS needs the cryptography package: pip install cryptography ({exc})"
        ) from exc


def local_shape(options: ClusterOptions) -> tuple[int, dict[str, float]]:
    """The embedded cluster's worker count and each worker's resources (``GPU`` or ``CPU`` slots)."""
    gpus = detect_gpus()
    if gpus:
        # One worker owns all of this node's GPUs and leases them to trials.
        n_workers = options.n_workers or 1
        return n_workers, {"GPU": float(max(1, gpus // n_workers))}
    n_workers = options.n_workers or (os.cpu_count() or 1)
    return n_workers, {"CPU": float(options.slots_per_worker)}


def _local_cluster(
    options: ClusterOptions,
    n_workers: int,
    threads: int,
    resources: dict[str, float],
    env: Mapping[str, str] | None,
    security: Security,
) -> LocalCluster:
    dashboard = f"{options.host}:0" if options.dashboard else None
    # The worker processes log nothing below CRITICAL to the terminal they share with the controller: their
    # errors while the cluster closes (a heartbeat to a scheduler already gone) are noise after a Ctrl-C; what a
    # trial raised is recorded by the controller (trials/<n>/error.log).
    quiet_workers = {} if options.verbose else {"DASK_LOGGING__DISTRIBUTED": "critical"}
    from distributed import LocalCluster

    from .plugins import CloseSchedulerHTTP, CloseWorkerHTTP, IgnoreInterrupt
    from .quiet_workers import spawn_without_sigint

    spawn_without_sigint()  # a Ctrl-C while a worker process starts reaches the controller only

    plugins = (IgnoreInterrupt(),) if options.dashboard else (IgnoreInterrupt(), CloseWorkerHTTP())
    return LocalCluster(
        n_workers=n_workers,
        threads_per_worker=max(1, threads),
        processes=True,
        host=options.host,
        protocol="tls://" if security.require_encryption else "tcp://",
        security=security,
        dashboard_address=dashboard,
        # The scheduler starts an HTTP server even without the dashboard, on port 8787 by default, and warns
        # "Port 8787 is already in use" when another cluster has it: any free port (closed at once, see above).
        scheduler_kwargs={
            "dashboard_address": f"{options.host}:0",
            "plugins": () if options.dashboard else (CloseSchedulerHTTP(),),
        },
        resources=resources,
        memory_limit=options.memory_limit,
        worker_dashboard_address=dashboard,
        env={**quiet_workers, **({} if options.dashboard else NO_HTTP_ENV), **dict(env or {})},
        silence_logs=_silence_logs(options),  # quiet_dask_logs' lower levels still hold
        plugins=plugins,
    )


# --- a running scheduler -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AddressBackend(Backend):
    """Join the scheduler at ``options.address`` (``tcp://``, ``tls://`` or a scheduler JSON file); start nothing."""

    kind: ClassVar[str] = "address"
    joins_scheduler: ClassVar[bool] = True
    summary: ClassVar[str] = "join a running Dask scheduler (tcp://, tls:// or a scheduler file); start nothing"

    def describe(self, options: ClusterOptions) -> str:
        return f"the running Dask scheduler at {options.address}"

    @contextlib.contextmanager
    def open(self, options: ClusterOptions, *, env: Mapping[str, str] | None = None) -> Iterator[Client]:
        client = _connect(options)
        try:
            _wait_for_first_worker(
                client,
                options.worker_timeout,
                f"no worker joined the scheduler at {options.address} within {options.worker_timeout:g}s "
                "(worker_timeout): start one with 'hypersweep worker ADDRESS'",
            )
            yield client
        finally:
            client.close(timeout=10)


def _connect(options: ClusterOptions) -> Client:
    kwargs: dict[str, Any] = {"timeout": options.connect_timeout, "security": options.security()}
    target = options.address
    if not target.startswith(("tcp://", "tls://", "inproc://", "ucx://")) and os.path.exists(target):
        kwargs["scheduler_file"] = target
        target = None  # type: ignore[assignment]
    from distributed import Client
    from distributed.security import Security

    address = scheduler_address(options.address)
    if "://" in address:
        check_scheduler(address, options.security() or Security(), options.connect_timeout)
    try:
        return Client(target, **kwargs) if target else Client(**kwargs)
    except (OSError, TimeoutError) as exc:
        raise ClusterError(
            f"cannot reach the Dask scheduler at {options.address!r} within {options.connect_timeout:g}s ({exc})"
        ) from exc


def check_scheduler(address: str, security: Security, timeout: float) -> None:
    """Raise ``ClusterError`` unless a Dask scheduler answers at ``address`` within ``timeout`` seconds.

    Dask's own ``Client`` bounds the TCP connect by its timeout but then waits for the scheduler's
    handshake for ever: something else on that port (an HTTP server, a dashboard port) would hang it.
    This asks the scheduler who it is, over Dask's own comm and ``security``, the whole exchange bounded.
    """

    async def identity() -> Any:
        from distributed.comm import connect

        comm = await connect(address, timeout=timeout, **security.get_connection_args("client"))
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    async def bounded() -> Any:
        return await asyncio.wait_for(identity(), timeout)

    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="hypersweep-check-scheduler")
    try:
        # A thread of its own: its own event loop, whatever the caller's thread runs.
        reply = pool.submit(asyncio.run, bounded()).result()
    except TimeoutError as exc:
        if _port_open(address):
            raise ClusterError(
                f"{address!r} accepts connections but gave no Dask answer within {timeout:g}s: is it a Dask "
                "scheduler's address (not an HTTP or dashboard port)?"
            ) from exc
        raise ClusterError(f"cannot reach the Dask scheduler at {address!r} within {timeout:g}s") from exc
    except OSError as exc:
        raise ClusterError(f"cannot reach the Dask scheduler at {address!r} within {timeout:g}s ({exc})") from exc
    except Exception as exc:  # noqa: BLE001 - whatever it sent back (read as frames), it is not a Dask scheduler
        raise ClusterError(
            f"{address!r} answered, but not in Dask's protocol ({type(exc).__name__} reading its answer): is it a "
            "Dask scheduler's address (not an HTTP or dashboard port)?"
        ) from exc
    finally:
        pool.shutdown(wait=False)
    kind = reply.get("type") if isinstance(reply, dict) else None
    if not isinstance(reply, dict) or kind in ("Worker", "Nanny"):
        what = f"a Dask {kind.lower()}" if kind else "something that speaks Dask's protocol"
        raise ClusterError(f"{address!r} is {what}, not a scheduler: give the scheduler's address")


def _port_open(address: str, timeout: float = 0.5) -> bool:
    from urllib.parse import urlsplit

    parts = urlsplit(address)
    try:
        with socket.create_connection((parts.hostname or "", parts.port or 0), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


# --- deploy projects: the scheduler starts here, the workers elsewhere ----------------------------


class _Deployed(Backend):
    """A backend whose optional deploy project starts the scheduler and asks a resource manager for workers.

    ``open``: start the deploy project's cluster object, ask for workers, wait up to ``start_timeout``
    for the first one to join, yield a ``Client``; close it all on exit.
    """

    start_timeout: float

    @classmethod
    def from_settings(cls, kind: str, settings: Backend | None) -> Backend:
        if not isinstance(settings, cls) or settings.kind != kind:
            raise SettingError(f"backend {kind!r} needs its [cluster.{kind}] settings, got {settings!r}")
        return settings

    def require(self) -> Any:
        return _import_extra(self.kind, self.extra)

    @abc.abstractmethod
    def _start(self, options: ClusterOptions) -> Any:
        """The deploy project's cluster object (its scheduler runs here)."""

    def _grow(self, cluster: Any) -> None:
        """Ask for workers, where starting the cluster object did not already."""

    @contextlib.contextmanager
    def open(self, options: ClusterOptions, *, env: Mapping[str, str] | None = None) -> Iterator[Client]:
        self.require()
        cluster = self._start(options)
        try:
            self._grow(cluster)
            from distributed import Client

            client = Client(cluster, timeout=options.connect_timeout, security=options.security())
            try:
                _wait_for_first_worker(
                    client,
                    self.start_timeout,
                    f"no worker joined within {self.start_timeout:g}s (start_timeout): check the queue "
                    "(squeue/qstat/kubectl) and the job logs",
                )
                yield client
            finally:
                client.close(timeout=10)
        finally:
            cluster.close(timeout=30)


def _wait_for_first_worker(client: Client, timeout: float, why: str) -> None:
    """Return once the scheduler has a worker; ``ClusterError(why)`` after ``timeout`` seconds without one."""
    try:
        client.wait_for_workers(1, timeout=timeout)
    except TimeoutError as exc:
        raise ClusterError(why) from exc


# --- SLURM and PBS -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class JobQueueBackend(_Deployed):
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
                self._wait_for_first_job(client, keeper)
                yield client
            finally:
                keeper.cancel_all()  # first, and not replaced: each worker leaves on SIGTERM, its log clean
                client.close(timeout=10)
        finally:
            keeper.close()
            cluster.close(timeout=30)

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

    def _wait_for_first_job(self, client: Client, keeper: JobKeeper) -> None:
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
                logs = "slurm-<job id>.out where run was started" if self.system == "slurm" else "the job logs"
                raise ClusterError(f"{keeper.stopped}: check {logs}")
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


def _slurm_kwargs(backend: JobQueueBackend) -> dict[str, Any]:
    directives = list(backend.job_extra_directives)
    gpus = backend.gpus_per_job
    if gpus and not any(re.search(r"--(gres|gpus)", d) for d in directives):
        directives.append(f"--gres=gpu:{gpus}")
    return {"job_extra_directives": directives}


def _pbs_kwargs(backend: JobQueueBackend) -> dict[str, Any]:
    return {
        "resource_spec": backend.resource_spec or _pbs_select(backend),
        "job_extra_directives": list(backend.job_extra_directives),
    }


def _pbs_select(backend: JobQueueBackend) -> str:
    from dask.utils import parse_bytes
    from dask_jobqueue.pbs import pbs_format_bytes_ceil

    gpus = f":ngpus={backend.gpus_per_job}" if backend.gpus_per_job else ""
    return f"select=1:ncpus={backend.cores}{gpus}:mem={pbs_format_bytes_ceil(parse_bytes(backend.memory))}"


# system -> (dask_jobqueue's cluster class, the keyword arguments only that system takes)
_JOB_SYSTEMS = {"slurm": ("SLURMCluster", _slurm_kwargs), "pbs": ("PBSCluster", _pbs_kwargs)}


def _cluster_class(system: str) -> type:
    jobqueue = _import_extra(system, JobQueueBackend.extra)
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


def _job_kwargs(backend: JobQueueBackend) -> dict[str, Any]:
    """Keyword arguments for jobqueue's cluster (and job) classes; nothing from the spec passes through raw."""
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
        "job_name": "hypersweep-worker",
    }
    if backend.job_script_prologue:  # it sets the node's environment up: its python, not this machine's venv path
        kwargs["python"] = "python"
    return {**kwargs, **_JOB_SYSTEMS[backend.system][1](backend)}


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
    kwargs = {**_job_kwargs(backend), **_network_kwargs(options), "interface": None}
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
    no_http = {} if options.dashboard else NO_HTTP_ROUTES
    with dask.config.set({"distributed.scheduler.allowed-failures": 0, **no_http}):
        return _cluster_class(backend.system)(
            n_workers=0,
            job_cls=_job_class(backend.system),
            scheduler_options=scheduler_options,
            silence_logs=_silence_logs(options),
            **_network_kwargs(options),
            **_job_kwargs(backend),
        )


# --- Kubernetes ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class KubernetesBackend(_Deployed):
    """A DaskCluster resource for the dask-kubernetes operator: ``n_workers`` pods, one worker each.

    ``gpus_per_worker`` > 0: each pod asks for that many ``nvidia.com/gpu`` and its worker owns them
    as ``GPU``; otherwise the worker owns ``slots_per_worker`` CPU slots. ``cpu``/``memory`` are
    Kubernetes quantities used as the worker pods' requests and limits.
    """

    kind: ClassVar[str] = "kubernetes"
    extra: ClassVar[str] = "dask_kubernetes"
    summary: ClassVar[str] = "worker pods of a DaskCluster for the dask-kubernetes operator ([cluster.kubernetes])"

    image: str
    name: str = "hypersweep"
    namespace: str = ""
    n_workers: int = 1
    gpus_per_worker: int = 0
    slots_per_worker: int = 1
    cpu: str = ""
    memory: str = ""
    start_timeout: float = 600.0

    def __post_init__(self) -> None:
        if not self.image:
            raise InvalidSetting("image", "image='': give the container image that has hypersweep installed")
        if not _K8S_NAME.match(self.name):
            raise InvalidSetting("name", f"name={self.name!r}: must be a lowercase DNS label (a-z, 0-9, '-')")
        if self.n_workers < 1 or self.slots_per_worker < 1 or self.gpus_per_worker < 0:
            bad = (
                "n_workers"
                if self.n_workers < 1
                else "slots_per_worker"
                if self.slots_per_worker < 1
                else ("gpus_per_worker")
            )
            raise InvalidSetting(
                bad,
                f"n_workers={self.n_workers!r}, slots_per_worker={self.slots_per_worker!r}, "
                f"gpus_per_worker={self.gpus_per_worker!r}: need n_workers, slots_per_worker >= 1, gpus >= 0",
            )
        if self.start_timeout <= 0:
            raise InvalidSetting("start_timeout", f"start_timeout={self.start_timeout!r}: must be > 0")

    def worker_resources(self) -> dict[str, dict[str, str]] | None:
        quantities = {k: v for k, v in (("cpu", self.cpu), ("memory", self.memory)) if v}
        limits = dict(quantities)
        if self.gpus_per_worker:
            limits["nvidia.com/gpu"] = str(self.gpus_per_worker)
        if not limits:
            return None
        return {"requests": quantities, "limits": limits} if quantities else {"limits": limits}

    def describe(self, options: ClusterOptions) -> str:
        where = f" in namespace {self.namespace!r}" if self.namespace else ""
        owns = worker_args(self.gpus_per_worker, self.slots_per_worker)[3]
        return (
            f"Kubernetes DaskCluster {self.name!r}{where}: {self.n_workers} worker pod(s) of {self.image}, "
            f"each owning {owns}"
        )

    def submission(self, options: ClusterOptions) -> str:
        """The DaskCluster resource as YAML."""
        import yaml

        return yaml.safe_dump(cluster_spec_dict(self), sort_keys=False)

    def _start(self, options: ClusterOptions) -> Any:
        return _kube_cluster(self)


def cluster_spec_dict(backend: KubernetesBackend) -> dict[str, Any]:
    """The DaskCluster resource, built by dask-kubernetes' ``make_cluster_spec`` (offline: nothing is created)."""
    backend.require()
    from dask_kubernetes.operator import make_cluster_spec

    command = ["dask", "worker", *worker_args(backend.gpus_per_worker, backend.slots_per_worker, 1)]
    spec = make_cluster_spec(
        name=backend.name,
        image=backend.image,
        n_workers=backend.n_workers,
        resources=backend.worker_resources(),
        worker_command=command,
    )
    # make_cluster_spec gives the scheduler pod the workers' resources too: it needs no GPU.
    for container in spec["spec"]["scheduler"]["spec"]["containers"]:
        container["resources"] = None
    if backend.namespace:
        spec["metadata"]["namespace"] = backend.namespace
    return spec


def _kube_cluster(backend: KubernetesBackend) -> Any:
    spec = cluster_spec_dict(backend)
    import httpx  # kr8s' HTTP client
    import kr8s  # dask-kubernetes' Kubernetes client
    import yaml
    from dask_kubernetes.exceptions import CrashLoopBackOffError, SchedulerStartupError, ValidationError
    from dask_kubernetes.operator import KubeCluster

    # No kubeconfig, an unreadable or empty one (kr8s then raises TypeError), no credentials.
    no_credentials = (OSError, ValueError, KeyError, TypeError, yaml.YAMLError)
    # No operator (RuntimeError), API refused or unreachable, pods that never start.
    refused = (
        OSError,
        TimeoutError,
        ValueError,
        RuntimeError,
        httpx.HTTPError,
        kr8s.ServerError,
        kr8s.NotFoundError,
        kr8s.APITimeoutError,
        kr8s.ConnectionClosedError,
        SchedulerStartupError,
        CrashLoopBackOffError,
        ValidationError,
    )
    try:
        kr8s.api()  # fail here, before a KubeCluster registers for cleanup at exit
    except no_credentials as exc:
        raise ClusterError(f"cannot reach Kubernetes (kubeconfig, credentials): {one_line(exc)}") from exc
    try:
        return KubeCluster(
            custom_cluster_spec=spec,
            namespace=backend.namespace or None,
            shutdown_on_close=True,
            resource_timeout=int(backend.start_timeout),
            quiet=True,
        )
    except refused as exc:
        raise ClusterError(f"cannot create the Kubernetes DaskCluster {backend.name!r}: {one_line(exc)}") from exc


# --- the registry --------------------------------------------------------------------------------

#: ``[cluster] backend`` name -> the class that implements it: each name is written once, as the class's ``kind``
#: (the job-queue class serves every system in ``JOBQUEUE_SYSTEMS``). ``search.vocab.registry.backends()`` reads it.
REGISTRY: Mapping[str, type[Backend]] = MappingProxyType(
    {
        LocalBackend.kind: LocalBackend,
        AddressBackend.kind: AddressBackend,
        **{system: JobQueueBackend for system in JOBQUEUE_SYSTEMS},
        KubernetesBackend.kind: KubernetesBackend,
    }
)


def backend_named(kind: str, settings: Backend | None = None) -> Backend:
    """The backend ``[cluster] backend = kind`` names; ``settings``: its parsed ``[cluster.<kind>]`` table, if any."""
    try:
        cls = REGISTRY[kind]
    except KeyError:
        raise SettingError(f"backend={kind!r}: must be one of {', '.join(REGISTRY)}") from None
    return cls.from_settings(kind, settings)


def backend_of(options: ClusterOptions) -> Backend:
    """The backend ``options`` asks for: its own, else the scheduler at ``address``, else the embedded cluster."""
    if options.backend is not None:
        return options.backend
    return AddressBackend() if options.address else LocalBackend()


def require_extra(kind: str) -> Any:
    """Import the deploy project the backend ``kind`` needs, or raise one line naming the extra to install."""
    module = REGISTRY[kind].extra
    if not module:
        raise ValueError(f"backend {kind!r} needs no optional extra")
    return _import_extra(kind, module)


def submission_text(options: ClusterOptions) -> str:
    """What the backend would submit: a SLURM/PBS job script, or the DaskCluster resource as YAML."""
    return backend_of(options).submission(options)
