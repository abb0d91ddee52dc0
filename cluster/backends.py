"""Clusters users already run: SLURM and PBS through dask-jobqueue, Kubernetes through dask-kubernetes.

Policy stays here and in plain frozen dataclasses; the mechanism is Dask's own
deploy projects, imported only when a backend is used (they are optional extras).

One Dask worker per node owns that node's GPUs as the resource ``GPU=n`` and runs
``n`` threads (one per GPU it can lease); without GPUs it owns ``CPU=slots`` with
one thread per slot. ``submission_text`` shows what would be submitted (a job
script, or the DaskCluster resource) without starting or submitting anything.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .connect import ClusterError

if TYPE_CHECKING:
    from distributed import Client

    from .connect import ClusterOptions

__all__ = [
    "JobQueueBackend",
    "KubernetesBackend",
    "MissingExtraError",
    "SCHEDULER_PLACEHOLDER",
    "cluster_spec_dict",
    "job_script",
    "open_backend",
    "require_extra",
    "submission_text",
    "worker_args",
]

JOBQUEUE_SYSTEMS = ("slurm", "pbs")
_EXTRAS = {"slurm": "dask_jobqueue", "pbs": "dask_jobqueue", "kubernetes": "dask_kubernetes"}
# In a printed job script the scheduler's port is only known once it has started.
SCHEDULER_PLACEHOLDER = "<port>"
_MEMORY = re.compile(r"^\s*\d+(\.\d+)?\s*([kKmMgGtTpP]i?)?[bB]?\s*$")
_WALLTIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class MissingExtraError(ImportError):
    """A backend's optional dependency is not installed; the message names the pip extra."""


def require_extra(backend: str) -> Any:
    """Import the deploy project ``backend`` needs, or raise one line naming the extra to install."""
    module = _EXTRAS[backend]
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"backend {backend!r} needs {module.replace('_', '-')}: pip install 'hypersweep[{backend}]' ({exc})"
        ) from exc


def worker_args(gpus: int, slots: int) -> list[str]:
    """``dask worker`` flags for one worker per node: ``GPU=gpus`` (if any) else ``CPU=slots``, one thread each."""
    if gpus < 0 or slots < 1:
        raise ValueError(f"gpus={gpus!r}, slots={slots!r}: need gpus >= 0 and slots >= 1")
    n = gpus if gpus > 0 else slots
    return ["--nthreads", str(n), "--resources", f"{'GPU' if gpus > 0 else 'CPU'}={n}"]


# --- SLURM and PBS -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class JobQueueBackend:
    """Workers as SLURM or PBS batch jobs, one job per node, scaled between a minimum and a maximum.

    ``gpus_per_job`` > 0: the job asks for that many GPUs and its single worker owns them as
    ``GPU``; otherwise each of the job's ``processes`` workers owns ``cores // processes`` CPU slots.
    """

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
            raise ValueError(f"system={self.system!r}: must be one of {', '.join(JOBQUEUE_SYSTEMS)}")
        if not _WALLTIME.match(self.walltime):
            raise ValueError(f"walltime={self.walltime!r}: must look like HH:MM:SS (or D-HH:MM:SS)")
        if not _MEMORY.match(self.memory):
            raise ValueError(f"memory={self.memory!r}: must be a size such as '64GB' or '32GiB'")
        for name in ("cores", "processes", "maximum_jobs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r}: must be >= 1")
        if self.gpus_per_job < 0 or self.minimum_jobs < 0:
            raise ValueError(f"gpus_per_job={self.gpus_per_job!r}, minimum_jobs={self.minimum_jobs!r}: must be >= 0")
        if self.maximum_jobs < self.minimum_jobs:
            raise ValueError(f"maximum_jobs={self.maximum_jobs!r}: must be >= minimum_jobs={self.minimum_jobs!r}")
        if self.processes > self.cores:
            raise ValueError(f"processes={self.processes!r}: must be <= cores={self.cores!r}")
        if self.gpus_per_job and self.processes != 1:
            raise ValueError(
                f"processes={self.processes!r}: must be 1 with gpus_per_job > 0 (one worker owns the node's GPUs)"
            )
        if self.resource_spec and self.system != "pbs":
            raise ValueError("resource_spec: PBS only")
        if self.start_timeout <= 0:
            raise ValueError(f"start_timeout={self.start_timeout!r}: must be > 0")

    @property
    def slots(self) -> int:
        """Slots each worker owns: its GPUs, else its share of the job's cores."""
        return self.gpus_per_job or self.cores // self.processes

    @property
    def adaptive(self) -> bool:
        return self.maximum_jobs > self.minimum_jobs


@functools.cache
def _job_class(system: str) -> type:
    """jobqueue's job class with threads = the worker's slots (jobqueue's own default is cores / processes)."""
    jobqueue = require_extra(system)
    base = {"slurm": jobqueue.SLURMCluster, "pbs": jobqueue.PBSCluster}[system].job_cls

    def __init__(self: Any, *args: Any, worker_threads: int, **kwargs: Any) -> None:
        self._worker_threads = worker_threads
        base.__init__(self, *args, **kwargs)

    threads = property(lambda self: self._worker_threads, doc="One thread per slot this worker owns.")
    return type(f"OneWorkerPerNode{base.__name__}", (base,), {"__init__": __init__, "worker_process_threads": threads})


def _cluster_class(system: str) -> type:
    jobqueue = require_extra(system)
    return {"slurm": jobqueue.SLURMCluster, "pbs": jobqueue.PBSCluster}[system]


def _job_kwargs(backend: JobQueueBackend) -> dict[str, Any]:
    """Keyword arguments for jobqueue's cluster (and job) classes; nothing from the spec passes through raw."""
    gpus = backend.gpus_per_job
    directives = list(backend.job_extra_directives)
    kwargs: dict[str, Any] = {
        "cores": backend.cores,
        "memory": backend.memory,
        "processes": backend.processes,
        "walltime": backend.walltime,
        "queue": backend.queue or None,
        "account": backend.account or None,
        "worker_threads": backend.slots,
        "worker_extra_args": worker_args(gpus, backend.slots)[2:],  # --nthreads comes from worker_threads
        "job_script_prologue": list(backend.job_script_prologue),
        "job_name": "hypersweep-worker",
    }
    if backend.system == "slurm" and gpus and not any(re.search(r"--(gres|gpus)", d) for d in directives):
        directives.append(f"--gres=gpu:{gpus}")
    if backend.system == "pbs":
        kwargs["resource_spec"] = backend.resource_spec or _pbs_select(backend)
    kwargs["job_extra_directives"] = directives
    return kwargs


def _pbs_select(backend: JobQueueBackend) -> str:
    from dask.utils import parse_bytes
    from dask_jobqueue.pbs import pbs_format_bytes_ceil

    gpus = f":ngpus={backend.gpus_per_job}" if backend.gpus_per_job else ""
    return f"select=1:ncpus={backend.cores}{gpus}:mem={pbs_format_bytes_ceil(parse_bytes(backend.memory))}"


def _network_kwargs(options: ClusterOptions) -> dict[str, Any]:
    """What jobqueue adds to every job: protocol and the workers' TLS files."""
    return {"protocol": options.protocol if options.tls else None, "security": options.security()}


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


def _jobqueue_backend(options: ClusterOptions) -> JobQueueBackend:
    backend = getattr(options, "backend", None)
    if not isinstance(backend, JobQueueBackend):
        raise ValueError(f"backend={backend!r}: not a SLURM/PBS backend")
    return backend


def _jobqueue_cluster(options: ClusterOptions) -> Any:
    """Start jobqueue's cluster object: a scheduler here on ``options.host``; no job is submitted yet."""
    import dask

    backend = _jobqueue_backend(options)
    network = _network_kwargs(options)
    scheduler_options = {
        "host": options.host,
        "port": 0,
        "dashboard": options.dashboard,
        "dashboard_address": f"{options.host}:0",  # never jobqueue's default ':8787' on every interface
    }
    # Same policy as the embedded cluster: a worker lost mid-trial fails the task at once and the
    # controller retries it (max_retries) from its checkpoint.
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        return _cluster_class(backend.system)(
            n_workers=0,
            job_cls=_job_class(backend.system),
            scheduler_options=scheduler_options,
            silence_logs=False,
            **network,
            **_job_kwargs(backend),
        )


def _scale(cluster: Any, backend: JobQueueBackend) -> None:
    if backend.adaptive:
        # Dask's Adaptive: keeps minimum_jobs, releases idle jobs. It grows only when tasks wait at the
        # scheduler, and the controller submits no more trials than there are free slots: see the README.
        cluster.adapt(minimum_jobs=backend.minimum_jobs, maximum_jobs=backend.maximum_jobs)
    else:
        cluster.scale(jobs=backend.maximum_jobs)


# --- Kubernetes ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class KubernetesBackend:
    """A DaskCluster resource for the dask-kubernetes operator: ``n_workers`` pods, one worker each.

    ``gpus_per_worker`` > 0: each pod asks for that many ``nvidia.com/gpu`` and its worker owns them
    as ``GPU``; otherwise the worker owns ``slots_per_worker`` CPU slots. ``cpu``/``memory`` are
    Kubernetes quantities used as the worker pods' requests and limits.
    """

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
            raise ValueError("image='': give the container image that has hypersweep installed")
        if not _K8S_NAME.match(self.name):
            raise ValueError(f"name={self.name!r}: must be a lowercase DNS label (a-z, 0-9, '-')")
        if self.n_workers < 1 or self.slots_per_worker < 1 or self.gpus_per_worker < 0:
            raise ValueError(
                f"n_workers={self.n_workers!r}, slots_per_worker={self.slots_per_worker!r}, "
                f"gpus_per_worker={self.gpus_per_worker!r}: need n_workers, slots_per_worker >= 1, gpus >= 0"
            )
        if self.start_timeout <= 0:
            raise ValueError(f"start_timeout={self.start_timeout!r}: must be > 0")

    def worker_resources(self) -> dict[str, dict[str, str]] | None:
        quantities = {k: v for k, v in (("cpu", self.cpu), ("memory", self.memory)) if v}
        limits = dict(quantities)
        if self.gpus_per_worker:
            limits["nvidia.com/gpu"] = str(self.gpus_per_worker)
        if not limits:
            return None
        return {"requests": quantities, "limits": limits} if quantities else {"limits": limits}


def cluster_spec_dict(backend: KubernetesBackend) -> dict[str, Any]:
    """The DaskCluster resource, built by dask-kubernetes' ``make_cluster_spec`` (offline: nothing is created)."""
    require_extra("kubernetes")
    from dask_kubernetes.operator import make_cluster_spec

    command = ["dask", "worker", *worker_args(backend.gpus_per_worker, backend.slots_per_worker)]
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


def _kube_cluster(options: ClusterOptions) -> Any:
    backend = options.backend
    assert isinstance(backend, KubernetesBackend)
    spec = cluster_spec_dict(backend)
    import kr8s  # dask-kubernetes' Kubernetes client
    from dask_kubernetes.operator import KubeCluster

    try:
        kr8s.api()  # no kubeconfig or credentials: fail here, before a KubeCluster registers for cleanup at exit
    except Exception as exc:  # noqa: BLE001 - kr8s raises plain ValueError/OSError subclasses
        raise ClusterError(f"cannot reach Kubernetes (kubeconfig, credentials): {_one_line(exc)}") from exc
    try:
        return KubeCluster(
            custom_cluster_spec=spec,
            namespace=backend.namespace or None,
            shutdown_on_close=True,
            resource_timeout=int(backend.start_timeout),
            quiet=True,
        )
    except Exception as exc:  # noqa: BLE001 - no kubeconfig, no operator, API refused: one line for the user
        raise ClusterError(f"cannot create the Kubernetes DaskCluster {backend.name!r}: {_one_line(exc)}") from exc


# --- both ----------------------------------------------------------------------------------------


def submission_text(options: ClusterOptions) -> str:
    """What the backend would submit: a SLURM/PBS job script, or the DaskCluster resource as YAML."""
    backend = getattr(options, "backend", None)
    if isinstance(backend, JobQueueBackend):
        require_extra(backend.system)
        return job_script(options)
    if isinstance(backend, KubernetesBackend):
        import yaml

        return yaml.safe_dump(cluster_spec_dict(backend), sort_keys=False)
    raise ValueError("cluster-script: this backend submits nothing (only slurm, pbs and kubernetes do)")


@contextlib.contextmanager
def open_backend(options: ClusterOptions) -> Iterator[Client]:
    """Start the backend's cluster, wait for its first worker, yield a ``Client``; close it all on exit."""
    from distributed import Client

    backend = options.backend
    if isinstance(backend, JobQueueBackend):
        require_extra(backend.system)
        cluster = _jobqueue_cluster(options)
        timeout = backend.start_timeout
    elif isinstance(backend, KubernetesBackend):
        require_extra("kubernetes")
        cluster = _kube_cluster(options)
        timeout = backend.start_timeout
    else:
        raise ValueError(f"backend={backend!r}: not a SLURM, PBS or Kubernetes backend")
    try:
        if isinstance(backend, JobQueueBackend):
            _scale(cluster, backend)
        client = Client(cluster, timeout=options.connect_timeout, security=options.security())
        try:
            _wait_for_first_worker(client, timeout)
            yield client
        finally:
            client.close(timeout=10)
    finally:
        cluster.close(timeout=30)


def _wait_for_first_worker(client: Client, timeout: float) -> None:
    try:
        client.wait_for_workers(1, timeout=timeout)
    except TimeoutError as exc:
        raise ClusterError(
            f"no worker joined within {timeout:g}s (start_timeout): check the queue (squeue/qstat/kubectl) and the "
            "job logs"
        ) from exc


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
