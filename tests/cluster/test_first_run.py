"""A trial's task ends at once as lost when Dask runs it again (cluster.first_run), on a real scheduler and
workers; with the worker plugin the question is asked while the task waits for a slot."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from distributed import Client, Event
from inproc import inproc_client

from cluster import first_run as first_run_module
from cluster.executor import Outcome, TrialStatus, run_once
from cluster.plugins import AskFirstRun


def _trial(seconds: float = 0.0, first_run: first_run_module.FirstRun | None = None) -> str:
    assert first_run is not None
    time.sleep(seconds)  # the set-up before the trainer
    first_run.check()
    return "ran"


@pytest.fixture
def client() -> Iterator[Client]:
    with inproc_client(1, 2) as c:
        yield c


def _run(client: Client, key: str, seconds: float = 0.0) -> object:
    return client.submit(run_once, key, _trial, [7], seconds, key=key, resources={"CPU": 1}, pure=False)


def _forget(client: Client, key: str) -> None:
    deadline = time.monotonic() + 30
    while client.run_on_scheduler(lambda dask_scheduler, k=key: k in dask_scheduler.tasks):
        assert time.monotonic() < deadline, f"{key} was never forgotten"
        time.sleep(0.02)


def test_a_task_run_again_under_the_same_key_ends_as_lost_without_the_plugin(client: Client) -> None:
    key = "t-trial-7-1"
    future = _run(client, key)
    assert future.result(timeout=30) == "ran"
    del future
    _forget(client, key)
    again = _run(client, key)  # what Dask does when the worker running it died
    outcome = again.result(timeout=30)
    assert isinstance(outcome, Outcome) and outcome.status == TrialStatus.LOST
    assert "Dask started the task again" in outcome.error


def _hold(name: str) -> bool:
    return bool(Event(name).wait(timeout=30))


def test_the_plugin_asks_while_the_task_queues_and_the_task_takes_that_answer(client: Client) -> None:
    client.register_plugin(AskFirstRun(), name=AskFirstRun.name)
    release = Event("first-run-release", client=client)
    blocker = client.submit(_hold, "first-run-release", resources={"CPU": 1}, pure=False)
    deadline = time.monotonic() + 10
    while not any(client.processing().values()):  # the slot is taken: the trial queues behind it
        assert time.monotonic() < deadline, "the blocker never started"
        time.sleep(0.01)
    key = "t-trial-8-1"
    queued = _run(client, key)
    deadline = time.monotonic() + 10
    while key not in first_run_module._EARLY:
        assert time.monotonic() < deadline, "the plugin did not ask while the task queued"
        time.sleep(0.01)
    assert not blocker.done()  # asked before the task could start
    release.set()
    assert queued.result(timeout=30) == "ran"
    assert key not in first_run_module._EARLY  # the task took the answer
    del queued
    _forget(client, key)
    again = _run(client, key)
    assert again.result(timeout=30).status == TrialStatus.LOST  # asked early again, answered "ran before"
    assert not first_run_module._EARLY
