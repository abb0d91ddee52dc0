"""A real Dask scheduler and workers in the test's own process (workers on threads, one ``CPU`` slot each), so a
test can patch what the workers run."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from distributed import Client, LocalCluster


@contextlib.contextmanager
def inproc_client(n_workers: int, threads: int) -> Iterator[Client]:
    with (
        LocalCluster(
            n_workers=n_workers,
            threads_per_worker=threads,
            processes=False,
            dashboard_address=None,
            resources={"CPU": 1},
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client
