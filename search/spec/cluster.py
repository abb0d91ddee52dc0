"""The spec's ``[cluster]`` section: where trials run and how the cluster is secured.

``backend`` picks where workers come from: ``local`` (an embedded cluster, the default),
``address`` (join a running scheduler; the default when ``scheduler`` is set), ``slurm``
and ``pbs`` (batch jobs through dask-jobqueue, ``[cluster.slurm]`` / ``[cluster.pbs]``) or
``kubernetes`` (the dask-kubernetes operator, ``[cluster.kubernetes]``).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from cluster.backends import JOBQUEUE_SYSTEMS, REGISTRY, JobQueueBackend, KubernetesBackend
from cluster.connect import is_loopback
from search.spec.table import SpecError, SpecTable

__all__ = ["BACKENDS", "ClusterSpec", "CLUSTER_KEYS", "parse_cluster", "check_tls_files"]

BACKENDS = tuple(REGISTRY)  # the names are written once, in cluster.backends (search.vocab.registry.backends())
CLUSTER_KEYS = (
    "scheduler",
    "n_workers",
    "slots_per_worker",
    "connect_timeout",
    "worker_timeout",
    "dashboard",
    "listen",
    "tls_ca_file",
    "tls_cert_file",
    "tls_key_file",
    "backend",
    "slurm",
    "pbs",
    "kubernetes",
)
_TLS_KEYS = ("tls_ca_file", "tls_cert_file", "tls_key_file")
_JOBQUEUE_KEYS = (
    "account",
    "walltime",
    "cores",
    "memory",
    "gpus_per_job",
    "processes",
    "minimum_jobs",
    "maximum_jobs",
    "job_extra_directives",
    "job_script_prologue",
    "start_timeout",
)
SLURM_KEYS = ("partition", "queue", *_JOBQUEUE_KEYS)
PBS_KEYS = ("queue", "resource_spec", *_JOBQUEUE_KEYS)
KUBERNETES_KEYS = (
    "image",
    "name",
    "namespace",
    "n_workers",
    "gpus_per_worker",
    "slots_per_worker",
    "resources",
    "start_timeout",
)
_K8S_RESOURCES = ("cpu", "memory")
#: The most worker processes, and slots per worker, a spec may ask for: beyond any one machine.
MAX_WORKERS = 1024
MAX_SLOTS = 1024


@dataclasses.dataclass(frozen=True)
class ClusterSpec:
    scheduler: str = ""
    """Empty: start an embedded `LocalCluster` on 127.0.0.1; else a scheduler address (`tcp://`, `tls://`) or a
    scheduler JSON file (`--scheduler` overrides)."""
    n_workers: int = 0
    """Embedded cluster workers, at most 1024; 0: one per CPU core, or one worker owning all GPUs."""
    slots_per_worker: int = 1
    """CPU slots per worker (trials that may run at once on it), at most 1024."""
    connect_timeout: float = 10.0
    """Seconds to reach a scheduler (then exit 3)."""
    worker_timeout: float = 60.0
    """Seconds the campaign may have no worker slot at all, on any backend: a joined scheduler's first worker (so the
    controller and the workers may start together), and every worker gone mid-run; then exit 3 with the resume
    command. Too few slots is said after 10 s, and every 60 s while it lasts."""
    dashboard: bool = False
    """Start Dask's dashboard on the listen address (plain HTTP); without it no Dask HTTP server runs at all."""
    listen: str = "127.0.0.1"
    """Where the scheduler started here (and the embedded workers) listen; anything but loopback needs TLS or
    `--insecure`. `slurm`: loopback only where every node of its partition is this host; `pbs`: not loopback."""
    tls_ca_file: str = ""
    """PEM file of the CA for mutual TLS between scheduler, workers and controller (all three `tls_*` files or none)."""
    tls_cert_file: str = ""
    """PEM certificate for mutual TLS (with `tls_ca_file` and `tls_key_file`)."""
    tls_key_file: str = ""
    """PEM private key for mutual TLS; refused if group or others may read it (`chmod 600`)."""
    backend: str = "local"
    """Where workers come from: `local` (an embedded cluster, the default), `address` (a running scheduler; the default
    when `scheduler` is set), `slurm`, `pbs` (batch jobs through dask-jobqueue) or `kubernetes` (the dask-kubernetes
    operator)."""
    slurm: JobQueueBackend | None = None
    """`[cluster.slurm]`: the batch jobs of the `slurm` backend (see the clusters how-to)."""
    pbs: JobQueueBackend | None = None
    """`[cluster.pbs]`: the batch jobs of the `pbs` backend (see the clusters how-to)."""
    kubernetes: KubernetesBackend | None = None
    """`[cluster.kubernetes]`: the worker pods of the `kubernetes` backend (see the clusters how-to)."""

    @property
    def tls(self) -> bool:
        return bool(self.tls_ca_file)

    @property
    def deploy(self) -> JobQueueBackend | KubernetesBackend | None:
        """The deploy project's settings for the chosen backend (None for local and address)."""
        return {"slurm": self.slurm, "pbs": self.pbs, "kubernetes": self.kubernetes}.get(self.backend)


def parse_cluster(t: SpecTable) -> ClusterSpec:
    scheduler = t.str("scheduler", "")
    backend = t.choice("backend", tuple(REGISTRY), "address" if scheduler else "local")
    if REGISTRY[backend].extra and scheduler:  # a deploy project starts the scheduler
        raise t.error(
            "scheduler", f"backend {backend!r} starts its own scheduler; remove scheduler or use backend = 'address'"
        )
    spec = ClusterSpec(
        scheduler=scheduler,
        n_workers=t.int("n_workers", 0, minimum=0, maximum=MAX_WORKERS),
        slots_per_worker=t.int("slots_per_worker", 1, minimum=1, maximum=MAX_SLOTS),
        connect_timeout=t.float("connect_timeout", ClusterSpec.connect_timeout, minimum=0.1),
        worker_timeout=t.float("worker_timeout", ClusterSpec.worker_timeout, minimum=0.1),
        dashboard=t.bool("dashboard", False),
        listen=t.str("listen", "127.0.0.1"),
        tls_ca_file=t.str("tls_ca_file", ""),
        tls_cert_file=t.str("tls_cert_file", ""),
        tls_key_file=t.str("tls_key_file", ""),
        backend=backend,
        # Every sub-table given is checked, so a typo is caught even in the backend not chosen now.
        slurm=_jobqueue(t, "slurm", backend) if t.has("slurm") or backend == "slurm" else None,
        pbs=_jobqueue(t, "pbs", backend) if t.has("pbs") or backend == "pbs" else None,
        kubernetes=_kubernetes(t, t.int("slots_per_worker", 1))
        if t.has("kubernetes") or backend == "kubernetes"
        else None,
    )
    given = [k for k in _TLS_KEYS if getattr(spec, k)]
    if given and len(given) != len(_TLS_KEYS):
        missing = sorted(set(_TLS_KEYS) - set(given))
        raise t.error(missing[0], f"TLS needs all of {', '.join(_TLS_KEYS)}; {missing[0]} is missing")
    _check_backend(t, spec)
    return spec


def check_tls_files(source: str, spec: ClusterSpec) -> None:
    """Each ``tls_*_file`` the spec names exists (a relative path: from the current directory, as Dask reads it).

    Checked for the commands that start or join a cluster (``run``, ``resume``, ``check``), not for those that
    only read a campaign folder."""
    for key in _TLS_KEYS:
        path = getattr(spec, key)
        if path and not os.path.isfile(path):
            raise SpecError(source, f"cluster.{key}", f"{path!r}: no such file (a PEM file is needed here)")


def _check_backend(t: SpecTable, spec: ClusterSpec) -> None:
    # SLURM may run its jobs on this host (a workstation, CI): loopback is checked against its nodes at start.
    if spec.backend in JOBQUEUE_SYSTEMS and spec.backend != "slurm" and is_loopback(spec.listen):
        raise t.error(
            "listen",
            f"{spec.listen!r} is loopback, but {spec.backend} workers run on other nodes: "
            "listen on this host's address they can reach (with TLS files, or --insecure)",
        )
    if spec.backend == "kubernetes" and spec.tls:
        raise t.error(
            "tls_ca_file",
            "the kubernetes backend reaches its scheduler through the operator's "
            "port-forward; TLS files are not used there (remove the tls_* keys)",
        )


def _jobqueue(parent: SpecTable, system: str, backend: str) -> JobQueueBackend:
    allowed = SLURM_KEYS if system == "slurm" else PBS_KEYS
    t = SpecTable(parent.source, parent.key(system), parent.table(system), allowed)
    queue = t.str("queue", "")
    if system == "slurm" and t.has("partition"):
        if t.has("queue"):
            raise t.error("partition", "give partition or queue (the same thing in SLURM), not both")
        queue = t.str("partition")
    minimum = t.int("minimum_jobs", 1, minimum=0)
    fields: dict[str, Any] = {
        "system": system,
        "walltime": t.str("walltime"),
        "cores": t.int("cores", minimum=1),
        "memory": t.str("memory"),
        "queue": queue,
        "account": t.str("account", ""),
        "gpus_per_job": t.int("gpus_per_job", 0, minimum=0),
        "processes": t.int("processes", 1, minimum=1),
        "minimum_jobs": minimum,
        "maximum_jobs": t.int("maximum_jobs", max(1, minimum), minimum=max(1, minimum)),
        "job_extra_directives": _strings(t, "job_extra_directives"),
        "job_script_prologue": _strings(t, "job_script_prologue"),
        "start_timeout": t.float("start_timeout", 3600.0, minimum=1.0),
    }
    if system == "pbs":
        fields["resource_spec"] = t.str("resource_spec", "")
    return _build(t, JobQueueBackend, fields)


def _kubernetes(parent: SpecTable, default_slots: int) -> KubernetesBackend:
    t = SpecTable(parent.source, parent.key("kubernetes"), parent.table("kubernetes"), KUBERNETES_KEYS)
    resources = SpecTable(t.source, t.key("resources"), t.table("resources"), _K8S_RESOURCES)
    fields = {
        "image": t.str("image"),
        "name": t.str("name", "hypersweep"),
        "namespace": t.str("namespace", ""),
        "n_workers": t.int("n_workers", 1, minimum=1),
        "gpus_per_worker": t.int("gpus_per_worker", 0, minimum=0),
        "slots_per_worker": t.int("slots_per_worker", default_slots, minimum=1),
        "cpu": _quantity(resources, "cpu"),
        "memory": _quantity(resources, "memory"),
        "start_timeout": t.float("start_timeout", 600.0, minimum=1.0),
    }
    return _build(t, KubernetesBackend, fields)


def _build(t: SpecTable, cls: type, fields: dict[str, Any]) -> Any:
    """The dataclass, its own checks turned into a spec error naming the key."""
    try:
        return cls(**fields)
    except ValueError as exc:
        key = getattr(exc, "field", "")  # cluster.errors.InvalidSetting names its setting
        key = key if key in fields else ""
        raise SpecError(t.source, t.key(key) if key else t.prefix, str(exc)) from exc


def _strings(t: SpecTable, name: str) -> tuple[str, ...]:
    value = t.data.get(name, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise t.error(name, f"must be a list of strings, got {type(value).__name__} {value!r}")
    return tuple(value)


def _quantity(t: SpecTable, name: str) -> str:
    value = t.data.get(name, "")
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise t.error(name, f"must be a Kubernetes quantity such as '4' or '16Gi', got {type(value).__name__}")
    return str(value)
