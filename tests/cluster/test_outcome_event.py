"""A trial's outcome comes up the event stream after its reports, so the controller does not fetch the task's
result; where the event does not come, the task's result still ends the trial. Real scheduler and workers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
from distributed import Client
from inproc import inproc_client

from cluster import task_runner
from cluster.channel import WorkerReporter
from cluster.executor import DaskExecutor, Finished, Outcome, Report, TrialRequest, TrialStatus


def _fit(config: Any, reporter: Any) -> dict[str, float]:
    for step in (1, 2, 3):
        reporter.report(step, {"score": float(config.number * 10 + step)})
    return {"score": float(config.number)}


def _config(number: int) -> dict[str, Any]:
    return {"study": "x", "number": number, "params": {}, "seed": number, "epochs": 1}


def test_an_outcome_survives_its_message_form_as_plain_msgpack() -> None:
    outcome = Outcome(
        TrialStatus.ERROR,
        {"score": 0.5},
        error="ValueError: bad",
        worker="tcp://127.0.0.1:1",
        pid=12,
        devices=(0, 3),
        started=1.0,
        finished=2.5,
        history=((1, {"score": 0.25}, 1.5), (2, {"score": 0.5}, 2.0)),
        stopped=True,
        peak_memory=2**31,
        memory_kind="rss",
        ranks=({"rank": 0, "host": "a", "epoch_seconds": [1.0]},),
    )
    message = msgpack.unpackb(msgpack.packb(outcome.to_message()), strict_map_key=False)
    assert Outcome.from_message(message) == outcome


@pytest.fixture
def client() -> Iterator[Client]:
    with inproc_client(2, 1) as c:
        yield c


def _drain(executor: DaskExecutor, numbers: set[int]) -> tuple[dict[int, Outcome], list[Report]]:
    done: dict[int, Outcome] = {}
    reports: list[Report] = []
    deadline = time.monotonic() + 60
    while set(done) != numbers:
        assert time.monotonic() < deadline, f"finished {sorted(done)} of {sorted(numbers)}"
        for event in executor.events(timeout=0.5):
            if isinstance(event, Finished):
                assert event.number not in done, "a trial ended twice"
                done[event.number] = event.outcome
            elif isinstance(event, Report):
                reports.append(event)
    for event in executor.events(timeout=0.5):  # the tasks' own ends come after: they add no second Finished
        assert not isinstance(event, Finished), event
    return done, reports


def test_outcomes_come_by_event_with_no_fetch_of_the_tasks_result(client: Client, monkeypatch) -> None:
    fetched: list[Any] = []
    original = task_runner._outcome
    monkeypatch.setattr(task_runner, "_outcome", lambda f: fetched.append(f) or original(f))
    executor = DaskExecutor(client, "test-outcome-event")
    executor.submit_batch([TrialRequest(n, _fit, _config(n)) for n in (1, 2, 3)])  # one task, three outcomes
    executor.submit(TrialRequest(4, _fit, _config(4)))
    done, reports = _drain(executor, {1, 2, 3, 4})
    executor.close()
    assert not fetched
    assert {n: o.metrics["score"] for n, o in done.items()} == {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}
    assert [h[0] for h in done[2].history] == [1, 2, 3] and done[2].status == TrialStatus.OK
    assert len(reports) == 12 and executor.running() == ()


def test_without_the_event_the_tasks_result_ends_the_trial(client: Client, monkeypatch) -> None:
    monkeypatch.setattr(WorkerReporter, "finished", lambda self, outcome: None)  # the message never comes
    executor = DaskExecutor(client, "test-outcome-fetch")
    executor.submit_batch([TrialRequest(n, _fit, _config(n)) for n in (5, 6)])
    done, _ = _drain(executor, {5, 6})
    executor.close()
    assert {n: o.metrics["score"] for n, o in done.items()} == {5: 5.0, 6: 6.0}
    assert all(o.status == TrialStatus.OK and len(o.history) == 3 for o in done.values())
