"""cluster/jobs.py on a real in-process Dask scheduler: the walltime ends a JobKeeper records there, read back to
tell a worker lost at its job's end (``job_expired``); the runner pool reads them too (tests/cluster/test_walltimes.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from distributed import Client, LocalCluster

from cluster.jobs import DEADLINES_KEY, WALLTIME_SLACK, job_deadlines, job_expired

pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]  # an in-process scheduler starts: ~1.5 s, more under load


@pytest.fixture
def client() -> Iterator[Client]:
    with LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster, Client(cluster) as c:
        yield c


def test_walltime_ends_recorded_on_the_scheduler_decide_expiry(client: Client) -> None:
    """(What each job's end leaves a trial time for: tests/cluster/test_walltimes.py.)"""
    now = time.time()
    client.set_metadata(list(DEADLINES_KEY), {"tcp://a:1": now - 1, "tcp://b:1": now + 100})
    assert job_expired(client, "tcp://a:1")
    assert not job_expired(client, "tcp://b:1") and not job_expired(client, "tcp://c:1")
    assert job_deadlines(client) == {"tcp://a:1": now - 1, "tcp://b:1": now + 100}
    client.set_metadata(list(DEADLINES_KEY), {"tcp://a:1": now + WALLTIME_SLACK / 2})
    assert job_expired(client, "tcp://a:1")  # SLURM's kill comes at the end, not before


def test_only_an_executor_on_a_cluster_that_follows_demand_leaves_it_on_the_scheduler(client: Client) -> None:
    """A cluster of fixed size (embedded, joined, min = max jobs) pays no scheduler round trip per launched trial."""
    from cluster.executor import DaskExecutor
    from cluster.jobs import DEMAND_KEY

    fixed = DaskExecutor(client, "fixed-size")
    fixed.want(3)
    assert client.get_metadata(list(DEMAND_KEY), default=None) is None
    fixed.close()
    scaling = DaskExecutor(client, "scaling", follows_demand=True)
    scaling.want(3)
    assert client.get_metadata(list(DEMAND_KEY)) == {"slots": 3, "busy": []}
    scaling.close()
