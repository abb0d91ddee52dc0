"""The controller's view of the workers never loses one that is there (issue 47.6, 47.7).

``Client.scheduler_info`` returns the client's cached identity, which the client's own refresh (every 2 s) replaces
with one that lists no worker: under load, a look at the workers then found none, and a trial "lost its worker
(left the cluster)" while the worker lived on (a retry spent), or a campaign was refused for "no worker with a free
slot", or a campaign recorded a cluster of no worker in its environment.json. Here the refresh runs every
millisecond, so the race that a loaded machine hits now and then comes at once.
"""

from __future__ import annotations

import time

import dask
import pytest
from distributed import Client, LocalCluster

from cluster.connect import worker_memory_limits, worker_slots
from search.store.environment import cluster_shape, scheduler_info

pytestmark = pytest.mark.slow


@pytest.mark.timeout(120)
def test_every_look_at_a_real_clusters_workers_finds_them_all_while_the_clients_refresh_races_it() -> None:
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with dask.config.set({"distributed.client.scheduler-info-interval": "1ms"}):
            client = Client(cluster)
        try:
            client.wait_for_workers(2, timeout=60)
            looks, short = 0, 0
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                looks += 1
                short += len(worker_slots(client)) != 2
                short += len(worker_memory_limits(client)) != 2
                short += cluster_shape(scheduler_info(client))["workers"] != 2  # what environment.json records
            assert looks > 100
            assert short == 0, f"{short} of {3 * looks} looks missed a worker that was there"
        finally:
            client.close()
