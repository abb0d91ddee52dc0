"""``[cluster] backend = "kubernetes"``: worker pods of a DaskCluster resource for the dask-kubernetes operator."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, ClassVar

from .deployed import Deployed
from .errors import ClusterError, InvalidSetting, one_line
from .options import ClusterOptions
from .worker_shape import worker_args

__all__ = ["KubernetesBackend", "cluster_spec_dict"]

_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclasses.dataclass(frozen=True)
class KubernetesBackend(Deployed):
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
