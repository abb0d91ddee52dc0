"""What the backends share that start the scheduler here and get their workers from a deploy project.

The deploy projects (dask-jobqueue, dask-kubernetes) are optional extras, imported only when their backend is used
(:func:`import_extra`, one line naming what to install when it is missing); :class:`Deployed` opens such a backend:
its cluster object, the workers asked for, the first one waited for.
"""

from __future__ import annotations

import abc
import contextlib
import importlib
import signal
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from .errors import ClusterError, MissingExtraError, SettingError
from .options import Backend, ClusterOptions
from .way_out import close_within

if TYPE_CHECKING:  # distributed loads when a cluster is opened, not when a light command reads a spec
    from distributed import Client

__all__ = ["Deployed", "import_extra", "install_hint", "wait_for_first_worker"]


def install_hint(kind: str, module: str) -> str:
    """How to install what backend ``kind`` needs: the checkout's extra, or the dependency itself
    (``hypersweep`` is installed from its repository, not from a package index)."""
    distribution = module.replace("_", "-")
    return f"pip install -e '.[{kind}]' in the hypersweep checkout, or pip install {distribution}"


def import_extra(kind: str, module: str) -> Any:
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


class Deployed(Backend):
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
        return import_extra(self.kind, self.extra)

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
                wait_for_first_worker(
                    client,
                    self.start_timeout,
                    f"no worker joined within {self.start_timeout:g}s (start_timeout): check the queue "
                    "(squeue/qstat/kubectl) and the job logs",
                )
                yield client
            finally:
                close_within(client, 10, f"the Dask client of the {self.kind} cluster did not close")
        finally:
            close_within(cluster, 30, f"the {self.kind} cluster did not close")


def wait_for_first_worker(client: Client, timeout: float, why: str) -> None:
    """Return once the scheduler has a worker; ``ClusterError(why)`` after ``timeout`` seconds without one."""
    try:
        client.wait_for_workers(1, timeout=timeout)
    except TimeoutError as exc:
        raise ClusterError(why) from exc
