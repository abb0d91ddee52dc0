"""How to get a cluster: the options every backend reads, and the ``Backend`` interface they all implement.

Plain data and one abstract class; the backends themselves live in ``cluster.backends``.
"""

from __future__ import annotations

import abc
import dataclasses
import ipaddress
import json
import os
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, ClassVar

from .errors import SettingError

if TYPE_CHECKING:
    from distributed import Client
    from distributed.security import Security

__all__ = [
    "LOOPBACK",
    "Backend",
    "ClusterOptions",
    "TLSFiles",
    "is_loopback",
    "scheduler_address",
    "check_scheduler_target",
    "plain_tcp_warning",
    "key_file_problem",
]

LOOPBACK = "127.0.0.1"


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def scheduler_address(target: str) -> str:
    """The scheduler address ``target`` names: itself, or the ``address`` in the scheduler JSON file it names.

    A scheduler file that does not exist (yet) or holds no address gives ``target`` back unchanged.
    """
    if target.startswith(("tcp://", "tls://", "inproc://", "ucx://")) or not os.path.isfile(target):
        return target
    try:
        with open(target) as fh:
            return str(json.load(fh)["address"])
    except (OSError, ValueError, KeyError, TypeError):
        return target


#: The address schemes a joined scheduler may have.
SCHEMES = ("tcp://", "tls://", "inproc://", "ucx://")


def check_scheduler_target(target: str) -> None:
    """Raise ``SettingError`` unless ``target`` is a scheduler address with a host and a port (``tcp://host:port``,
    ``tls://host:port``) or an existing scheduler file."""
    rule = "must be tcp://host:port, tls://host:port or an existing scheduler file"
    if "://" not in target:
        if not os.path.isfile(target):
            raise SettingError(f"scheduler {target!r}: {rule} (no such file)")
        return
    if not target.startswith(SCHEMES):
        raise SettingError(f"scheduler {target!r}: {rule}")
    host = _host_of(target)
    port = target.split("://", 1)[1].rsplit(":", 1)[-1] if ":" in target.split("://", 1)[1] else ""
    if target.startswith(("tcp://", "tls://")) and (not host or not port.isdigit() or " " in host):
        raise SettingError(f"scheduler {target!r}: {rule} (needs a host and a port number)")


def plain_tcp_warning(address: str) -> str:
    """One line for a user about to join ``address`` over plain TCP ("" for anything else).

    Dask authenticates nothing on ``tcp://``: whoever can connect (every local user, on loopback) can
    run code on its workers, as the user they run as.
    """
    if not address.startswith("tcp://"):
        return ""
    who = "any local user" if is_loopback(_host_of(address)) else "anyone who can reach it"
    return (
        f"the scheduler {address} is plain TCP: {who} can run code on its workers, as the user they run as; "
        "use a tls:// scheduler with TLS files (--tls CA CERT KEY) to keep them out"
    )


def key_file_problem(path: str) -> str:
    """Why the private key file ``path`` must not be used ("" when it is fine): readable or writable by group
    or others (ssh refuses such keys the same way)."""
    try:
        mode = os.stat(path).st_mode & 0o777
    except OSError:
        return ""
    if mode & 0o077:
        return (
            f"tls key_file={path!r} is accessible by others (mode {mode:04o}): a private key must be readable "
            f"by its owner only; run chmod 600 {path}"
        )
    return ""


def _host_of(address: str) -> str:
    """The host of ``tcp://host:port`` (IPv6 in brackets too); "" when there is none."""
    rest = address.split("://", 1)[-1]
    if rest.startswith("["):
        return rest[1:].split("]", 1)[0]
    return rest.rsplit(":", 1)[0] if ":" in rest else rest


class Backend(abc.ABC):
    """Where the workers come from. Each backend opens itself and says what it starts or submits.

    ``kind`` is the spec's ``[cluster] backend`` name; ``cluster.backends.REGISTRY`` maps it to the class.
    """

    #: True: joins a running scheduler (needs ``ClusterOptions.address``); False: starts its own.
    joins_scheduler: ClassVar[bool] = False
    #: The optional deploy project it imports when used ("" : none); ``require`` names the pip extra.
    extra: ClassVar[str] = ""
    #: One line on the backend for the docs and ``search.vocab.registry.backends()``; ``{kind}``: the name it is given.
    summary: ClassVar[str] = ""

    @property
    def follows_demand(self) -> bool:
        """Whether this cluster grows and shrinks with the campaign's demand (a job backend's ``minimum_jobs <
        maximum_jobs``): only then does the executor leave its demand on the scheduler (``DaskExecutor.want``)."""
        return False

    @classmethod
    def description_of(cls, kind: str) -> str:
        """The one line on the backend named ``kind`` (one class may serve several names: slurm, pbs)."""
        return cls.summary.format(kind=kind)

    @classmethod
    def from_settings(cls, kind: str, settings: Backend | None) -> Backend:
        """The backend for ``[cluster] backend = kind``, from its ``[cluster.<kind>]`` settings where it has any."""
        if settings is not None:
            raise SettingError(f"backend {kind!r} takes no settings, got {settings!r}")
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
        raise SettingError("cluster-script: this backend submits nothing (only slurm, pbs and kubernetes do)")

    def require(self) -> None:
        """Fail now, in one line naming the pip extra, if the optional deploy project is missing."""
        return None  # the backends without an optional deploy project need nothing

    def check(self, options: ClusterOptions) -> None:
        """Refuse options this backend cannot use (``ValueError``); ``ClusterOptions`` calls it."""
        if self.joins_scheduler and not options.address:
            raise SettingError(
                f"backend {self.kind!r} needs a scheduler address "
                "(tcp://host:port, tls://host:port or a scheduler file)"
            )
        if not self.joins_scheduler and options.address:
            raise SettingError(f"address={options.address!r}: a {type(self).__name__} starts its own scheduler")


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
                raise SettingError(f"tls {name}={path!r}: must be an existing PEM file")
        problem = key_file_problem(self.key_file)
        if problem:
            raise SettingError(problem)

    def security(self) -> Security:
        from distributed.security import Security  # distributed loads only when a cluster is opened

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
    worker_timeout: float = 60.0
    """Seconds a joined scheduler (``address``) may take to have its first worker; the campaign's limit on a cluster
    with no slot at all (``search.loop.slot_watch``); the embedded cluster replaces a worker its nanny does not restart
    well within it (``cluster.revive``)."""
    memory_limit: str = "auto"
    tls: TLSFiles | None = None
    insecure: bool = False
    backend: Backend | None = None
    verbose: bool = False
    trials_per_gpu: int = 1
    """Trials sharing one GPU (``[trainer] gpus = 1/k``): a GPU worker started here runs that many threads per GPU."""
    job_logs: str = ""
    """The folder a SLURM/PBS job's log goes to (a campaign's ``jobs/``); "": where the batch system puts it (SLURM:
    ``slurm-<job id>.out`` in the folder ``run`` was started in)."""

    def __post_init__(self) -> None:
        if self.backend is not None:
            self.backend.check(self)
        if self.n_workers is not None and (not isinstance(self.n_workers, int) or self.n_workers < 1):
            raise SettingError(f"n_workers={self.n_workers!r}: must be an int >= 1")
        if not isinstance(self.slots_per_worker, int) or self.slots_per_worker < 1:
            raise SettingError(f"slots_per_worker={self.slots_per_worker!r}: must be an int >= 1")
        if not isinstance(self.trials_per_gpu, int) or self.trials_per_gpu < 1:
            raise SettingError(f"trials_per_gpu={self.trials_per_gpu!r}: must be an int >= 1")
        if self.connect_timeout <= 0:
            raise SettingError(f"connect_timeout={self.connect_timeout!r}: must be > 0")
        if self.worker_timeout <= 0:
            raise SettingError(f"worker_timeout={self.worker_timeout!r}: must be > 0")
        if not is_loopback(self.host) and self.tls is None and not self.insecure:
            raise SettingError(
                f"listening on {self.host!r} without TLS is refused: anyone who reaches that address could "
                "run code on the workers; give TLS files (tls_ca_file, tls_cert_file, tls_key_file) "
                "or pass --insecure to accept the risk"
            )
        if self.address:
            check_scheduler_target(self.address)
        if self.address.startswith("tls://") and self.tls is None:
            raise SettingError(f"scheduler {self.address!r} uses TLS: give tls_ca_file, tls_cert_file and tls_key_file")
        joined = scheduler_address(self.address) if self.address else ""
        if joined.startswith("tcp://") and not is_loopback(_host_of(joined)) and not self.insecure:
            raise SettingError(
                f"joining the scheduler {joined!r} over plain TCP is refused: anyone who reaches it could run code "
                "on its workers and read the traffic; use its tls:// address with TLS files (--tls CA CERT KEY), "
                "or pass --insecure to accept the risk"
            )

    @property
    def protocol(self) -> str:
        return "tls://" if self.tls is not None else "tcp://"

    def insecure_exposure(self) -> str:
        """What ``insecure`` lets through with these options, in words; "" when nothing (loopback or TLS)."""
        if self.tls is not None or not self.insecure:
            return ""
        starts_own = not self.backend.joins_scheduler if self.backend is not None else not self.address
        if starts_own:
            return "" if is_loopback(self.host) else f"the scheduler and workers listen on {self.host} over plain TCP"
        joined = scheduler_address(self.address)
        if joined.startswith("tcp://") and not is_loopback(_host_of(joined)):
            return f"the scheduler {joined} is joined over plain TCP"
        return ""

    def plain_tcp_warning(self) -> str:
        """The one-line warning for joining a plain ``tcp://`` scheduler, loopback included ("" otherwise)."""
        joins = self.backend.joins_scheduler if self.backend is not None else bool(self.address)
        return plain_tcp_warning(scheduler_address(self.address)) if joins and self.address else ""

    def plain_local_cluster(self) -> bool:
        """Whether a cluster started here talks plain TCP: only when told so (``insecure``) off loopback without TLS
        files, for workers elsewhere that have no key. Otherwise the embedded cluster makes a key of its own."""
        return self.tls is None and self.insecure and not is_loopback(self.host)

    def security(self) -> Security | None:
        return self.tls.security() if self.tls is not None else None
