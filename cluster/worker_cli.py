"""``hypersweep worker``: start one Dask worker by hand, shaped the way campaigns expect.

For clusters no Dask deploy project covers: on each machine (with the project
installed) run ``hypersweep worker tls://scheduler:8786 --tls ca.pem cert.pem key.pem``.
The worker owns the machine's GPUs as ``GPU=n`` with enough threads for the finest packing a spec
allows (Dask's ``GPU`` resource caps how many trials run: two of ``gpus = 0.5`` per GPU), or, without
GPUs, ``CPU=slots`` with one thread per slot. It is ``dask worker`` (with a nanny)
underneath: this process checks the settings and that the scheduler answers, then
becomes that command.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import sys
import time
from urllib.parse import urlsplit

from .errors import ClusterError, SettingError
from .no_http import NO_HTTP_ENV
from .options import TLSFiles, is_loopback, plain_tcp_warning
from .resources import detect_gpus
from .worker_shape import worker_args

__all__ = ["WorkerOptions", "worker_command", "check_reachable", "start_worker"]

WORKER_MODULE = "distributed.cli.dask_worker"
NO_HTTP_PRELOAD = "cluster.no_http"  # the worker closes its plain-HTTP server as it starts
_RETRY_S = 0.2  # between attempts to reach the scheduler


@dataclasses.dataclass(frozen=True)
class WorkerOptions:
    """One worker process: where its scheduler is, what it owns, how it listens."""

    scheduler: str
    gpus: int | None = None  # None: the GPUs this machine has
    slots: int | None = None  # CPU slots when there are no GPUs; None: one per core
    tls: TLSFiles | None = None
    host: str = ""  # listen address; "": the scheduler's for a loopback scheduler, else the one routing to it
    name: str = ""
    insecure: bool = False
    connect_timeout: float = 10.0
    trials_per_gpu: int | None = None  # at most this many trials per GPU; None: as the trials ask (gpus = 1/k: k)

    def __post_init__(self) -> None:
        if self.gpus is not None and self.slots is not None:
            raise SettingError("--gpus and --slots: give one (GPUs are the slots where there are any)")
        if self.gpus is not None and self.gpus < 0:
            raise SettingError(f"--gpus={self.gpus}: must be >= 0")
        if self.slots is not None and self.slots < 1:
            raise SettingError(f"--slots={self.slots}: must be >= 1")
        if self.trials_per_gpu is not None and self.trials_per_gpu < 1:
            raise SettingError(f"--trials-per-gpu={self.trials_per_gpu}: must be >= 1")
        if self.connect_timeout <= 0:
            raise SettingError(f"--timeout={self.connect_timeout:g}: must be > 0")
        address = self.address
        if not address.startswith(("tcp://", "tls://")):
            raise SettingError(f"scheduler {address!r}: must be tcp://host:port, tls://host:port or a scheduler file")
        if address.startswith("tls://") and self.tls is None:
            raise SettingError(f"scheduler {address!r} uses TLS: give --tls CA CERT KEY")
        if address.startswith("tcp://") and self.tls is not None:
            raise SettingError(f"--tls given but the scheduler {address!r} is plain tcp://; use its tls:// address")
        exposed = [h for h in (self.scheduler_host, self.host) if h and not is_loopback(h)]
        if exposed and self.tls is None and not self.insecure:
            raise SettingError(
                f"a worker talking plain TCP over {exposed[0]!r} is refused: anyone who reaches it could run code "
                "on it; use a tls:// scheduler with --tls CA CERT KEY, or pass --insecure to accept the risk"
            )

    def insecure_exposure(self) -> str:
        """What ``insecure`` lets through with these options, in words; "" when nothing (loopback or TLS)."""
        exposed = [h for h in (self.scheduler_host, self.host) if h and not is_loopback(h)]
        if not self.insecure or self.tls is not None or not exposed:
            return ""
        return f"this worker talks plain TCP over {exposed[0]}"

    def plain_tcp_warning(self) -> str:
        """The one-line warning for a worker joining a plain ``tcp://`` scheduler, loopback included."""
        return plain_tcp_warning(self.address)

    @property
    def address(self) -> str:
        """The scheduler's address (read from the scheduler file when one was given)."""
        return _resolve(self.scheduler)

    @property
    def scheduler_host(self) -> str:
        return urlsplit(self.address).hostname or ""

    def shape(self) -> tuple[int, int]:
        """(gpus, slots) this worker will own."""
        gpus = detect_gpus() if self.gpus is None and self.slots is None else (self.gpus or 0)
        return gpus, (self.slots or os.cpu_count() or 1)


def _resolve(scheduler: str) -> str:
    if scheduler.startswith(("tcp://", "tls://")) or not os.path.isfile(scheduler):
        return scheduler
    try:
        with open(scheduler) as fh:
            return str(json.load(fh)["address"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SettingError(f"scheduler file {scheduler!r}: no scheduler address in it ({exc})") from exc


def worker_command(options: WorkerOptions) -> list[str]:
    """The ``dask worker`` command line this worker runs."""
    gpus, slots = options.shape()
    argv = [sys.executable, "-m", WORKER_MODULE, options.address, *worker_args(gpus, slots, options.trials_per_gpu)]
    argv += ["--nworkers", "1", "--nanny", "--no-dashboard", "--preload", NO_HTTP_PRELOAD]
    host = listen_host(options)
    if host:  # the HTTP server, closed as the worker starts (NO_HTTP_PRELOAD), binds on this address only meanwhile
        argv += ["--host", host, "--dashboard-address", f"{_bracketed(host)}:0"]
    if options.name:
        argv += ["--name", options.name]
    if options.tls is not None:
        argv += [
            "--tls-ca-file",
            options.tls.ca_file,
            "--tls-cert",
            options.tls.cert_file,
            "--tls-key",
            options.tls.key_file,
        ]
    return argv


def listen_host(options: WorkerOptions) -> str:
    """Where the worker and its nanny listen: ``--host``, else the scheduler's own address for a loopback scheduler,
    else this machine's address on the route to the scheduler (never every interface); "" when this machine has no
    route to it (Dask's choice then; such a worker cannot reach its scheduler anyway)."""
    if options.host:
        return options.host
    if is_loopback(options.scheduler_host):
        return options.scheduler_host
    from distributed.utils import get_ip

    try:
        return str(get_ip(options.scheduler_host))
    except OSError:
        return ""


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def worker_env(options: WorkerOptions) -> dict[str, str]:
    """The worker's environment: with CPU slots, one BLAS/OpenMP thread per trial unless already set.

    Its HTTP server (plain HTTP, even on a TLS cluster) serves no routes unless the environment says
    otherwise (``DASK_DISTRIBUTED__WORKER__HTTP__ROUTES``): no metrics or health pages for anyone who reaches it.
    """
    env = dict(os.environ)
    for name, value in NO_HTTP_ENV.items():
        env.setdefault(name, value)
    if options.shape()[0] == 0:
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("MKL_NUM_THREADS", "1")
    return env


def check_reachable(address: str, timeout: float) -> None:
    """Raise ``ClusterError`` unless something accepts TCP connections at ``address`` within ``timeout`` s.

    A refused or failed connection is tried again until then: a scheduler started together with its
    workers may not be listening yet (a refusal comes back at once, long before ``timeout``).
    """
    parts = urlsplit(address)
    if not parts.hostname or not parts.port:
        raise SettingError(f"scheduler {address!r}: needs a host and a port")
    deadline = time.monotonic() + timeout
    while True:
        left = max(deadline - time.monotonic(), 0.1)
        try:
            with socket.create_connection((parts.hostname, parts.port), timeout=left):
                return
        except socket.gaierror as exc:  # an unknown host name does not get better by waiting
            raise ClusterError(f"cannot reach the Dask scheduler at {address!r} ({exc})") from exc
        except OSError as exc:
            if time.monotonic() + _RETRY_S >= deadline:
                message = f"cannot reach the Dask scheduler at {address!r} within {timeout:g}s ({exc})"
                raise ClusterError(message) from exc
        time.sleep(_RETRY_S)


def start_worker(options: WorkerOptions) -> None:
    """Check the scheduler answers, then replace this process with ``dask worker`` (does not return)."""
    check_reachable(options.address, options.connect_timeout)
    argv = worker_command(options)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(argv[0], argv, worker_env(options))
