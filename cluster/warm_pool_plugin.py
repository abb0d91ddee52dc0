"""The worker plugin that keeps a worker's warm pool of trial processes (:mod:`trainers.warm_pool`) and ends it with
the worker. Apart from :mod:`cluster.plugins`, which reaches the slot runners (and so the entrypoint that uses
this one)."""

from __future__ import annotations

from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

__all__ = ["WarmPool"]


class WarmPool(WorkerPlugin):
    """Keeps the warm pool of trial processes (:mod:`trainers.warm_pool`) on this worker and shuts it down with the
    worker; attached by the first trial that needs a process of its own (:meth:`attach`), on any cluster."""

    name = "hypersweep-warm-pool"
    idempotent = True

    def setup(self, worker: Any) -> None:
        from trainers import warm_pool  # at run time only

        warm_pool.enable()

    def teardown(self, worker: Any) -> None:
        from trainers import warm_pool

        warm_pool.shutdown()

    @classmethod
    def attach(cls, worker: Any) -> None:
        """Called on ``worker`` in a trial's thread: the pool is on from now on and ends when the worker closes."""
        from distributed.utils import sync

        from trainers import warm_pool

        if cls.name not in worker.plugins:
            sync(worker.loop, worker.plugin_add, cls(), cls.name, callback_timeout=30)
        warm_pool.enable()  # again: in-process workers share one pool, which a closed worker's teardown shut down
