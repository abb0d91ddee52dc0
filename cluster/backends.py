"""Where the workers come from: one ``Backend`` class per ``[cluster] backend`` name, chosen from ``REGISTRY``.

``local``       ``LocalBackend``: an embedded ``LocalCluster`` of worker processes, sized to this machine.
``address``     ``AddressBackend``: join a running scheduler (``tcp://``, ``tls://`` or a scheduler file).
``slurm/pbs``   ``JobQueueBackend``: workers as batch jobs, through dask-jobqueue.
``kubernetes``  ``KubernetesBackend``: a DaskCluster resource for the dask-kubernetes operator.

Each class lives in its own module (``local_backend``, ``address_backend``, ``jobqueue_backend``,
``kubernetes_backend``; the deploy projects' shared base in ``deployed``); this module is the registry and
re-exports their public names.

Each backend opens itself (``open(options)`` yields a connected ``Client`` and closes what it
started), says in one line what it starts (``describe``) and shows what it would submit
(``submission``: a job script, or the DaskCluster resource) without starting anything.
Policy stays in the backends, plain frozen dataclasses; the mechanism is Dask's own
``LocalCluster``/``Client`` and deploy projects, the latter imported only when their backend
is used (they are optional extras).

One Dask worker per node owns that node's GPUs as the resource ``GPU=n``; without GPUs it owns ``CPU=slots``
with one thread per slot (:mod:`cluster.worker_shape`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from .address_backend import AddressBackend, check_scheduler
from .deployed import import_extra, install_hint
from .errors import MissingExtraError, SettingError
from .jobqueue_backend import JOB_LOG_LEVEL, JOBQUEUE_SYSTEMS, SCHEDULER_PLACEHOLDER, JobQueueBackend, job_script
from .kubernetes_backend import KubernetesBackend, cluster_spec_dict
from .local_backend import LocalBackend
from .no_http import NO_HTTP_ENV, NO_HTTP_ROUTES
from .options import Backend, ClusterOptions
from .worker_shape import local_shape, worker_args

__all__ = [
    "AddressBackend",
    "Backend",
    "JOBQUEUE_SYSTEMS",
    "JOB_LOG_LEVEL",
    "JobQueueBackend",
    "KubernetesBackend",
    "LocalBackend",
    "MissingExtraError",
    "NO_HTTP_ENV",
    "NO_HTTP_ROUTES",
    "REGISTRY",
    "SCHEDULER_PLACEHOLDER",
    "backend_named",
    "backend_of",
    "check_scheduler",
    "cluster_spec_dict",
    "install_hint",
    "job_script",
    "local_shape",
    "require_extra",
    "submission_text",
    "worker_args",
]

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
    return import_extra(kind, module)


def submission_text(options: ClusterOptions) -> str:
    """What the backend would submit: a SLURM/PBS job script, or the DaskCluster resource as YAML."""
    return backend_of(options).submission(options)
