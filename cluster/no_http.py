"""A Dask preload (``dask worker --preload cluster.no_http``): the worker closes its HTTP server as it starts.

Every Dask worker starts a plain-HTTP server (health, Prometheus metrics) even with ``--no-dashboard``, on all
interfaces by default and even when its cluster talks TLS. ``hypersweep worker`` asks for no HTTP: Dask runs a
preload's ``dask_setup`` after the HTTP server started and before the worker registers with its scheduler, so
nothing but the worker's and its nanny's Dask ports is left listening.
"""

from __future__ import annotations

from typing import Any

__all__ = ["dask_setup"]


def dask_setup(worker: Any) -> None:
    """Dask's preload hook: close ``worker``'s HTTP server (see the module docstring)."""
    http = getattr(worker, "http_server", None)
    if http is not None:
        http.stop()
        worker.services.pop("dashboard", None)
