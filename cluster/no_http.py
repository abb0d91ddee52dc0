"""A Dask preload (``dask worker --preload cluster.no_http``, ``dask scheduler --preload cluster.no_http``): the
worker or scheduler closes its HTTP server as it starts.

Every Dask worker and scheduler starts a plain-HTTP server (health, Prometheus metrics; the scheduler's JSON API too)
even with ``--no-dashboard``, on all interfaces by default and even when its cluster talks TLS. ``hypersweep worker``
asks for no HTTP: Dask runs a preload's ``dask_setup`` after the HTTP server started and before a worker registers
with its scheduler, so nothing but the Dask ports is left listening.
"""

from __future__ import annotations

from typing import Any

__all__ = ["NO_HTTP_ENV", "NO_HTTP_ROUTES", "dask_setup"]

# --- no plain-HTTP servers -----------------------------------------------------------------------
#
# Every Dask scheduler and worker starts an HTTP server (health, Prometheus metrics, the scheduler's
# JSON API, which can retire workers) in plain HTTP, even when its cluster talks TLS. Unless the user
# asks for the dashboard, the embedded cluster serves no routes and closes those servers as soon as
# each scheduler or worker starts, before a worker registers: nothing but the TLS ports listens.

#: Dask config (and, for processes started here, environment) that serves no HTTP routes.
NO_HTTP_ROUTES: dict[str, list[str]] = {"distributed.scheduler.http.routes": [], "distributed.worker.http.routes": []}
NO_HTTP_ENV = {"DASK_DISTRIBUTED__SCHEDULER__HTTP__ROUTES": "[]", "DASK_DISTRIBUTED__WORKER__HTTP__ROUTES": "[]"}


def dask_setup(server: Any) -> None:
    """Dask's preload hook: close the HTTP server of ``server`` (a worker or a scheduler; see the module docstring)."""
    http = getattr(server, "http_server", None)
    if http is not None:
        http.stop()
        server.services.pop("dashboard", None)
