"""cluster/jobs.py on a real in-process Dask scheduler: the walltime ends a JobKeeper records there, read back to
tell a worker lost at its job's end (``job_expired``; the runner pool reads them too: tests/cluster/test_walltimes.py);
and the jobs' cancel at the end bounded, on a stand-in cluster whose scancel never answers."""

from __future__ import annotations

import asyncio
import threading
import time
import types
from collections.abc import Iterator

import pytest
from distributed import Client, LocalCluster

from cluster.jobs import DEADLINES_KEY, WALLTIME_SLACK, JobKeeper, job_deadlines, job_expired

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


class _Job:
    """A stand-in for one of dask-jobqueue's jobs: its cancel command (``close``) ends at once, or never answers
    (an unresponsive slurmctld, which cannot be made here without stopping the machine's shared SLURM)."""

    def __init__(self, job_id: str, answers: bool) -> None:
        self.job_id, self.answers = job_id, answers

    async def close(self) -> None:
        if not self.answers:
            await asyncio.Event().wait()


class _Cluster:
    """A stand-in for dask-jobqueue's cluster, as much of it as cancelling the jobs reads: its jobs, its loop."""

    def __init__(self, jobs: list[_Job]) -> None:
        self.workers = {f"job-{job.job_id}": job for job in jobs}
        self.scheduler_info: dict[str, dict[str, object]] = {"workers": {}}
        self.loop = types.SimpleNamespace(asyncio_loop=asyncio.new_event_loop())
        self._thread = threading.Thread(target=self.loop.asyncio_loop.run_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.loop.asyncio_loop.call_soon_threadsafe(self.loop.asyncio_loop.stop)
        self._thread.join(timeout=10)


@pytest.mark.timeout(20)
def test_cancel_all_with_a_scancel_that_never_answers_stand_in_ends_in_its_time_and_names_the_job() -> None:
    """At a campaign's end (Ctrl-C included) the jobs' cancel takes ``timeout`` s at most and never raises (it ran
    in a ``finally``: an error there took the place of the Ctrl-C); the job whose scancel did not answer is named,
    with the command to run, and the one whose did is not."""
    cluster = _Cluster([_Job("41", answers=True), _Job("42", answers=False)])
    lines: list[str] = []
    try:
        started = time.monotonic()
        JobKeeper(cluster, "slurm", notify=lines.append).cancel_all(timeout=1.0)
        took = time.monotonic() - started
    finally:
        cluster.stop()
    assert took < 5, f"{took:.1f}s"
    assert lines == [
        "SLURM did not confirm the cancel of job(s) 42 within 1s: if still queued, cancel them with 'scancel 42'"
    ]
