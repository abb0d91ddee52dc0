"""How to get a cluster: the options every backend reads, and the ``Backend`` interface they all implement.

Plain data and one abstract class; the backends themselves live in ``cluster.backends``.
"""

from __future__ import annotations

import abc
import dataclasses
import ipaddress
import os
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, ClassVar

from distributed.security import Security

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["LOOPBACK", "Backend", "ClusterOptions", "TLSFiles", "is_loopback"]

LOOPBACK = "127.0.0.1"


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Backend(abc.ABC):
    """Where the workers come from. Each backend opens itself and says what it starts or submits.

    ``kind`` is the spec's ``[cluster] backend`` name; ``cluster.backends.REGISTRY`` maps it to the class.
    """

    #: True: joins a running scheduler (needs ``ClusterOptions.address``); False: starts its own.
    joins_scheduler: ClassVar[bool] = False
    #: The optional deploy project it imports when used ("" : none); ``require`` names the pip extra.
    extra: ClassVar[str] = ""

    @classmethod
    def from_settings(cls, kind: str, settings: Backend | None) -> Backend:
        """The backend for ``[cluster] backend = kind``, from its ``[cluster.<kind>]`` settings where it has any."""
        if settings is not None:
            raise ValueError(f"backend {kind!r} takes no settings, got {settings!r}")
        return cls()

    @property
    @abc.abstractmethod
    def kind(self) -> str:
        """The spec's name for this backend: local, address, slurm, pbs or kubernetes."""

    @abc.abstractmethod
    def open(self, options: ClusterOptions, *, env: Mapping[str, str] | None = None) -> AbstractContextManager[Client]:
        """A context manager: start or join the cluster, yield a connected ``Client``, close what it started."""

    @abc.abstractmethod
    def describe(self, options: ClusterOptions) -> str:
        """One line saying what ``open`` would start or join."""

    def submission(self, options: ClusterOptions) -> str:
        """What this backend would submit (a job script, a cluster resource); most submit nothing."""
        raise ValueError("cluster-script: this backend submits nothing (only slurm, pbs and kubernetes do)")

    def require(self) -> None:
        """Fail now, in one line naming the pip extra, if the optional deploy project is missing."""

    def check(self, options: ClusterOptions) -> None:
        """Refuse options this backend cannot use (``ValueError``); ``ClusterOptions`` calls it."""
        if self.joins_scheduler and not options.address:
            raise ValueError(f"backend {self.kind!r} needs a scheduler address "
                             "(tcp://host:port, tls://host:port or a scheduler file)")  # fmt: skip
        if not self.joins_scheduler and options.address:
            raise ValueError(f"address={options.address!r}: a {type(self).__name__} starts its own scheduler")


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


@dataclasses.dataclass(frozen=True)
class ClusterOptions:
    """How to get a cluster.

    ``backend`` None: ``address`` empty starts a ``LocalCluster`` of ``n_workers`` worker processes
    (default: one per GPU if there are GPUs, else one per CPU core), each owning ``slots_per_worker``
    slots of the resource ``GPU`` (GPUs) or ``CPU`` (no GPUs); ``address`` set joins that scheduler
    (``tcp://``, ``tls://`` or a scheduler JSON file). Otherwise the ``Backend`` given decides.
    ``dashboard``: serve Dask's dashboard (on a free port). ``verbose``: leave Dask's INFO logs on.
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
    backend: Backend | None = None
    verbose: bool = False

    def __post_init__(self) -> None:
        if self.backend is not None:
            self.backend.check(self)
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
