"""``[cluster] backend = "local"``: an embedded ``LocalCluster`` of worker processes on this machine (the default)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from .errors import ClusterError
from .no_http import NO_HTTP_ENV, NO_HTTP_ROUTES
from .options import Backend, ClusterOptions
from .quiet_workers import silence_logs
from .way_out import close_within
from .worker_shape import local_shape

if TYPE_CHECKING:  # distributed loads when a cluster is opened, not when a light command reads a spec
    from distributed import Client, LocalCluster
    from distributed.security import Security

__all__ = ["LocalBackend"]


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
                close_within(client, 10, "the Dask client of the embedded cluster did not close")
        finally:
            close_within(cluster, 20, "the embedded cluster did not close")


def _temporary_security() -> Security:
    """Mutual TLS with a key and self-signed certificate made now, for this cluster alone (in memory)."""
    from distributed.security import Security

    try:
        return Security.temporary()
    except ImportError as exc:
        raise ClusterError(
            f"the embedded cluster's TLS needs the cryptography package: pip install cryptography ({exc})"
        ) from exc


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

    from .plugins import CloseSchedulerHTTP, CloseWorkerHTTP, ExitWhenClosed, IgnoreInterrupt
    from .quiet_workers import spawn_without_sigint

    spawn_without_sigint()  # a Ctrl-C while a worker process starts reaches the controller only

    plugins = (IgnoreInterrupt(), ExitWhenClosed(), *(() if options.dashboard else (CloseWorkerHTTP(),)))
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
        silence_logs=silence_logs(options),  # quiet_dask_logs' lower levels still hold
        plugins=plugins,
    )
