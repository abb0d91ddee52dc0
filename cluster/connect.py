"""Start an embedded Dask cluster or join an existing one.

Policy lives here (how many workers, which resources, which addresses are safe);
the mechanism is Dask's own ``LocalCluster`` and ``Client``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from typing import Any

import dask
from distributed import Client, LocalCluster
from distributed.security import Security

__all__ = ["is_loopback", "TLSFiles", "quiet_dask_logs", "ClusterOptions", "ClusterError", "open_cluster", "detect_gpus", "slot_resource", "worker_slots"]

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


class ClusterError(RuntimeError):
    """A cluster that cannot be started or reached; the message is one line for the user."""


@dataclasses.dataclass(frozen=True)
class ClusterOptions:
    """How to get a cluster.

    ``address`` empty: start a ``LocalCluster`` of ``n_workers`` worker processes
    (default: one per GPU if there are GPUs, else one per CPU core), each owning
    ``slots_per_worker`` slots of the resource ``GPU`` (GPUs) or ``CPU`` (no GPUs).
    ``address`` set: join that scheduler (``tcp://``, ``tls://`` or a scheduler JSON file).
    """

    address: str = ""
    n_workers: int | None = None
    slots_per_worker: int = 1
    host: str = LOOPBACK
    dashboard: bool = False
    connect_timeout: float = 10.0
    memory_limit: str = "auto"
    tls: TLSFiles | None = None
    insecure: bool = False
    # A SLURM/PBS/Kubernetes backend (cluster.backends); None: the embedded cluster or ``address``.
    backend: Any = None

    def __post_init__(self) -> None:
        if self.backend is not None and self.address:
            raise ValueError(f"address={self.address!r}: a {type(self.backend).__name__} starts its own scheduler")
        if self.n_workers is not None and (not isinstance(self.n_workers, int) or self.n_workers < 1):
            raise ValueError(f"n_workers={self.n_workers!r}: must be an int >= 1")
        if not isinstance(self.slots_per_worker, int) or self.slots_per_worker < 1:
            raise ValueError(f"slots_per_worker={self.slots_per_worker!r}: must be an int >= 1")
        if self.connect_timeout <= 0:
            raise ValueError(f"connect_timeout={self.connect_timeout!r}: must be > 0")
        if not is_loopback(self.host) and self.tls is None and not self.insecure:
            raise ValueError(
                f"listening on {self.host!r} without TLS is refused: anyone who reaches that address could "
                "run code on the workers; give TLS files (tls_ca_file, tls_cert_file, tls_key_file) "
                "or pass --insecure to accept the risk"
            )
        if self.address.startswith("tls://") and self.tls is None:
            raise ValueError(f"scheduler {self.address!r} uses TLS: give tls_ca_file, tls_cert_file and tls_key_file")

    @property
    def protocol(self) -> str:
        return "tls://" if self.tls is not None else "tcp://"

    def security(self) -> Security | None:
        return self.tls.security() if self.tls is not None else None


@dataclasses.dataclass(frozen=True)
class TLSFiles:
    """PEM files for mutual TLS: a CA and one certificate/key pair used by every party."""

    ca_file: str
    cert_file: str
    key_file: str

    def __post_init__(self) -> None:
        for name in ("ca_file", "cert_file", "key_file"):
            path = getattr(self, name)
            if not path or not os.path.isfile(path):
                raise ValueError(f"tls {name}={path!r}: must be an existing PEM file")

    def security(self) -> Security:
        return Security(
            tls_ca_file=self.ca_file,
            tls_client_cert=self.cert_file,
            tls_client_key=self.key_file,
            tls_scheduler_cert=self.cert_file,
            tls_scheduler_key=self.key_file,
            tls_worker_cert=self.cert_file,
            tls_worker_key=self.key_file,
            require_encryption=True,
        )


def quiet_dask_logs(level: int = logging.ERROR) -> None:
    """Hide Dask's start/stop chatter (INFO) in this process; errors still show."""
    for name in list(logging.root.manager.loggerDict):
        if name.split(".")[0] in ("distributed", "dask", "tornado"):
            logging.getLogger(name).setLevel(level)
    for name in ("distributed", "dask", "tornado"):
        logging.getLogger(name).setLevel(level)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def detect_gpus() -> int:
    """Number of visible NVIDIA GPUs, without importing torch (``nvidia-smi -L``)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() not in ("", "-1")])
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return 0
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def slot_resource(n_gpus: int) -> str:
    """The resource name trials ask for: ``GPU`` where there are GPUs, else ``CPU`` slots."""
    return "GPU" if n_gpus > 0 else "CPU"


def _local_shape(options: ClusterOptions) -> tuple[int, dict[str, float]]:
    gpus = detect_gpus()
    if gpus:
        # One worker owns all of this node's GPUs and leases them to trials.
        n_workers = options.n_workers or 1
        return n_workers, {"GPU": float(max(1, gpus // n_workers))}
    n_workers = options.n_workers or (os.cpu_count() or 1)
    return n_workers, {"CPU": float(options.slots_per_worker)}


def worker_slots(client: Client) -> dict[str, dict[str, float]]:
    """Each worker's declared resources, by worker address."""
    info = client.scheduler_info(n_workers=-1) if _accepts_n_workers(client) else client.scheduler_info()
    return {addr: dict(w.get("resources") or {}) for addr, w in info.get("workers", {}).items()}


def _accepts_n_workers(client: Client) -> bool:
    import inspect

    return "n_workers" in inspect.signature(client.scheduler_info).parameters


@contextlib.contextmanager
def open_cluster(options: ClusterOptions, *, env: Mapping[str, str] | None = None) -> Iterator[Client]:
    """Yield a connected ``Client``; close whatever was started on exit, errors and Ctrl-C included."""
    if options.backend is not None:
        from .backends import open_backend

        with open_backend(options) as client:
            yield client
        return
    if options.address:
        client = _connect(options)
        try:
            yield client
        finally:
            client.close(timeout=10)
        return
    n_workers, resources = _local_shape(options)
    threads = int(sum(resources.values()))
    # A worker that dies mid-trial fails the task at once: the controller retries it
    # (max_retries) from its checkpoint, rather than Dask retrying it silently.
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        cluster = _local_cluster(options, n_workers, threads, resources, env)
    try:
        client = Client(cluster, timeout=options.connect_timeout, security=options.security())
        try:
            yield client
        finally:
            client.close(timeout=10)
    finally:
        cluster.close(timeout=20)


def _local_cluster(
    options: ClusterOptions, n_workers: int, threads: int, resources: dict[str, float], env: Mapping[str, str] | None
) -> LocalCluster:
    return LocalCluster(
        n_workers=n_workers,
        threads_per_worker=max(1, threads),
        processes=True,
        host=options.host,
        protocol=options.protocol,
        security=options.security(),
        dashboard_address=f"{options.host}:0" if options.dashboard else None,
        resources=resources,
        memory_limit=options.memory_limit,
        worker_dashboard_address=f"{options.host}:0" if options.dashboard else None,
        env={"DASK_LOGGING__DISTRIBUTED": "error", **dict(env or {})},
        silence_logs=False,  # keep the levels the caller chose (quiet_dask_logs)
    )


def _connect(options: ClusterOptions) -> Client:
    kwargs: dict[str, Any] = {"timeout": options.connect_timeout, "security": options.security()}
    target = options.address
    if not target.startswith(("tcp://", "tls://", "inproc://", "ucx://")) and os.path.exists(target):
        kwargs["scheduler_file"] = target
        target = None  # type: ignore[assignment]
    try:
        return Client(target, **kwargs) if target else Client(**kwargs)
    except (OSError, TimeoutError) as exc:
        raise ClusterError(
            f"cannot reach the Dask scheduler at {options.address!r} within {options.connect_timeout:g}s ({exc})"
        ) from exc
