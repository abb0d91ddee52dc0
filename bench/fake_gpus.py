"""Fake GPUs on a CPU machine: Dask workers that declare ``GPU=n`` with no CUDA behind it, so the scheduler's
counters, the workers' device leases and the warm pool run as they would on GPUs (the benchmarks' and tests'
CPU twin of a GPU node)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distributed import LocalCluster

__all__ = ["fake_gpu_cluster"]


@contextlib.contextmanager
def fake_gpu_cluster(
    workers: int,
    gpus: int,
    threads: int,
    *,
    pythonpath: str = "",
    env: Mapping[str, str] | None = None,
    processes: bool = True,
) -> Iterator[LocalCluster]:
    """``workers`` Dask workers on this machine, each declaring ``GPU=gpus`` and running ``threads`` threads (so
    ``threads / gpus`` trials per fake GPU at most), no dashboard; closed on the way out.

    ``pythonpath``: the worker processes' ``PYTHONPATH`` (where the trainers they import are); ``env``: more of their
    environment. ``processes=False``: workers in this process (they take neither)."""
    from distributed import LocalCluster

    settings: dict[str, Any] = {}
    if processes:
        settings = {"host": "127.0.0.1", "env": {**({"PYTHONPATH": pythonpath} if pythonpath else {}), **(env or {})}}
    with LocalCluster(
        n_workers=workers,
        threads_per_worker=threads,
        resources={"GPU": gpus},
        processes=processes,
        dashboard_address=None,
        **settings,
    ) as cluster:
        yield cluster
