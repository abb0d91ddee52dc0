"""Slot runners: one long-lived task per slot runs the one-slot trials the executor sends it, with each trial's
guarantees kept (it starts, reports and ends as a task of its own would, runs at most once, and a runner that ends
or dies hands back what it did not run). Real Dask schedulers and workers: in this process, and worker processes
with nannies for the kills."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import SchedulerPlugin
from inproc import inproc_client

from cluster.executor import DaskExecutor, Finished, Report, Started, TrialRequest, TrialStatus
from cluster.outcome import Outcome
from cluster.slot_runner import Inbox, put_trials
from trainers.api import load_trainer

HERE = Path(__file__).resolve().parent


def _fit(config: Any, reporter: Any) -> dict[str, float]:
    for step in (1, 2):
        reporter.report(step, {"score": float(config.number * 10 + step)})
    time.sleep(float(dict(config.options).get("sleep", 0.02)))
    return {"score": float(config.number)}


def _config(number: int, **options: Any) -> dict[str, Any]:
    return {"study": "x", "number": number, "params": {}, "seed": number, "epochs": 1, "options": options}


def _drain(executor: DaskExecutor, numbers: set[int], timeout: float = 60) -> tuple[dict[int, Outcome], list[Any]]:
    done: dict[int, Outcome] = {}
    seen: list[Any] = []
    deadline = time.monotonic() + timeout
    while set(done) != numbers:
        assert time.monotonic() < deadline, f"finished {sorted(done)} of {sorted(numbers)}"
        for event in executor.events(0.5):
            seen.append(event)
            if isinstance(event, Finished):
                assert event.number not in done, f"trial {event.number} finished twice"
                done[event.number] = event.outcome
    return done, seen


class _Processed(SchedulerPlugin):
    """The keys of every task the scheduler sent to a worker."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if finish == "processing":
            self.keys.append(str(key))


def _processed(cluster: Any) -> _Processed:
    plugin = _Processed()
    cluster.scheduler.add_plugin(plugin)
    return plugin


@contextlib.contextmanager
def _nanny_cluster(slots: int) -> Iterator[Client]:
    """A client of one worker process with a nanny (a kill restarts it) and ``slots`` one-slot threads."""
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=slots, processes=True, dashboard_address=None, resources={"CPU": slots}
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


def test_an_inbox_hands_out_in_order_and_closes_when_idle_so_that_nothing_put_later_is_lost() -> None:
    inbox = Inbox()
    assert inbox.put([("a", b"1", True), ("b", b"2", True)])
    assert inbox.take(1.0) == ("a", b"1", True)
    assert inbox.take(1.0) == ("b", b"2", True)
    started = time.monotonic()
    assert inbox.take(0.2) is None  # idle: closed in the same step
    assert time.monotonic() - started >= 0.19
    assert not inbox.put([("c", b"3", True)])  # refused, so the executor places it again


def test_retiring_an_inbox_drains_it_or_hands_the_rest_back_now() -> None:
    drained = Inbox()
    drained.put([("a", b"1", True)])
    drained.retire(now=False)
    assert drained.take(5.0) == ("a", b"1", True)
    assert drained.take(5.0) is None
    now = Inbox()
    later = threading.Timer(0.1, now.retire, kwargs={"now": True})  # while the runner waits for its next trial
    later.start()
    started = time.monotonic()
    assert now.take(5.0) is None
    assert time.monotonic() - started < 4
    later.join()
    busy = Inbox()
    busy.put([("a", b"1", True), ("b", b"2", True)])
    busy.retire(now=True)
    assert busy.take(5.0) is None
    assert busy.close() == [("a", b"1", True), ("b", b"2", True)]


def test_a_put_to_a_runner_this_worker_does_not_have_is_refused() -> None:
    assert put_trials(None, "nobody-runner-1", [("k", b"", True)]) == "closed"


@pytest.fixture
def client() -> Iterator[Client]:
    with inproc_client(2, 1) as c:
        yield c


def test_one_slot_trials_run_in_one_runner_per_slot_and_end_as_their_own_tasks_would(client: Client) -> None:
    tasks = _processed(client.cluster)
    executor = DaskExecutor(client, "runners-a")
    try:
        for number in range(12):
            executor.submit(TrialRequest(number, _fit, _config(number)))
        done, seen = _drain(executor, set(range(12)))
    finally:
        executor.close()
    assert {n: (o.status, dict(o.metrics)) for n, o in done.items()} == {
        n: (TrialStatus.OK, {"score": float(n)}) for n in range(12)
    }
    assert {e.number for e in seen if isinstance(e, Started)} == set(range(12))
    assert sorted((e.number, e.step) for e in seen if isinstance(e, Report)) == [
        (n, s) for n in range(12) for s in (1, 2)
    ]
    assert all(
        o.history == tuple((s, {"score": float(n * 10 + s)}, o.history[s - 1][2]) for s in (1, 2))
        for n, o in done.items()
    )
    assert all("-runner-" in key for key in tasks.keys), tasks.keys
    assert 1 <= len(tasks.keys) <= 2, tasks.keys  # 12 trials, one task per slot


def test_closing_the_executor_ends_its_runners_and_frees_their_slots(client: Client) -> None:
    executor = DaskExecutor(client, "runners-b")
    for number in range(4):
        executor.submit(TrialRequest(number, _fit, _config(number)))
    _drain(executor, set(range(4)))
    assert any(client.processing().values())  # idle runners hold their slots until the campaign ends
    executor.close()
    deadline = time.monotonic() + 10
    while any(client.processing().values()):
        assert time.monotonic() < deadline, client.processing()
        time.sleep(0.05)


def test_an_idle_runner_gives_its_slot_back(client: Client) -> None:
    tasks = _processed(client.cluster)
    executor = DaskExecutor(client, "runners-c")
    assert executor._roads.pool is not None
    executor._roads.pool._idle = 0.3
    try:
        executor.submit(TrialRequest(0, _fit, _config(0)))
        _drain(executor, {0})
        deadline = time.monotonic() + 10
        while any(client.processing().values()):
            assert time.monotonic() < deadline, client.processing()
            executor.events(0.05)
        executor.submit(TrialRequest(1, _fit, _config(1)))  # a new runner starts for it
        done, _ = _drain(executor, {1})
    finally:
        executor.close()
    assert done[1].status == TrialStatus.OK
    assert len(tasks.keys) == 2 and all("-runner-" in key for key in tasks.keys), tasks.keys


def test_a_runner_starts_where_its_first_trial_would_rather_run(client: Client) -> None:
    workers = sorted(client.scheduler_info()["workers"])
    executor = DaskExecutor(client, "runners-e")
    try:
        for number, worker in enumerate(reversed(workers)):
            executor.submit(TrialRequest(number, _fit, _config(number, sleep=0.3), prefer=worker))
        done, _ = _drain(executor, {0, 1})
    finally:
        executor.close()
    assert [done[0].worker, done[1].worker] == list(reversed(workers))


def test_a_wider_trial_retires_the_runners_and_runs_as_a_task() -> None:
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None, resources={"CPU": 2}
        ) as cluster,
        Client(cluster) as wide,
    ):
        tasks = _processed(cluster)
        executor = DaskExecutor(wide, "runners-d")
        try:
            executor.submit(TrialRequest(0, _fit, _config(0)))
            executor.submit(TrialRequest(1, _fit, _config(1)))
            _drain(executor, {0, 1})
            executor.submit(TrialRequest(2, _fit, _config(2), width=2))  # needs both slots the runners hold
            done, _ = _drain(executor, {2}, timeout=30)
            executor.submit(TrialRequest(3, _fit, _config(3)))  # and from then on, tasks
            done.update(_drain(executor, {3}, timeout=30)[0])
        finally:
            executor.close()
        assert {n: o.status for n, o in done.items()} == {2: TrialStatus.OK, 3: TrialStatus.OK}
        assert [key.rpartition("-")[0].split("-")[-1] for key in tasks.keys if "-trial-" in key] == ["2", "3"]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_killed_trials_runner_hands_back_its_queue_and_every_trial_runs_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runners on one worker process (2 slots), 8 trials queued behind their two long ones: killing trial 0
    restarts the worker, so trial 0 ends cancelled and the other runner's running trial lost, and the queued trials
    run on the restarted worker, each once."""
    monkeypatch.syspath_prepend(str(HERE))
    entry = "runner_trainers:counted_fit"
    load_trainer(entry, [HERE])
    runs = tmp_path / "runs.txt"
    options = {"runs": str(runs), "sleep": 0.2, "long": 60, "long_trials": [0, 1]}
    with _nanny_cluster(2) as procs:
        executor = DaskExecutor(procs, "runners-kill")
        try:
            for number in range(10):
                executor.submit(TrialRequest(number, entry, _config(number, **options)))
            started: dict[int, str] = {}
            deadline = time.monotonic() + 60
            while not {0, 1} <= set(started):
                assert time.monotonic() < deadline, started
                for event in executor.events(0.5):
                    if isinstance(event, Started):
                        started[event.number] = event.worker
            assert started[0] == started[1]
            assert executor.kill(0, started[0])
            done, _ = _drain(executor, set(range(10)), timeout=120)
        finally:
            executor.close()
    assert done[0].status == TrialStatus.CANCELLED
    assert done[1].status == TrialStatus.LOST, done[1]
    assert {n: done[n].status for n in range(2, 10)} == {n: TrialStatus.OK for n in range(2, 10)}
    counts: dict[int, int] = {}
    for line in runs.read_text().splitlines():
        counts[int(line.split()[0])] = counts.get(int(line.split()[0]), 0) + 1
    assert counts == {n: 1 for n in range(10)}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_trial_sent_again_after_its_worker_died_runs_once_the_worker_is_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The only worker exits under its runner: the trial ends lost; sent again while the cluster has no slot (its
    nanny restarts the worker), it waits for the worker and runs there."""
    monkeypatch.syspath_prepend(str(HERE))
    entry = "runner_trainers:dies_once_fit"
    load_trainer(entry, [HERE])
    options = {"marker": str(tmp_path / "died")}
    with _nanny_cluster(1) as procs:
        executor = DaskExecutor(procs, "runners-died")
        try:
            executor.submit(TrialRequest(0, entry, _config(0, **options)))
            first, _ = _drain(executor, {0}, timeout=60)
            executor.submit(TrialRequest(0, entry, _config(0, **options)))  # the controller's retry
            again, _ = _drain(executor, {0}, timeout=120)
        finally:
            executor.close()
    assert first[0].status == TrialStatus.LOST, first[0]
    assert again[0].status == TrialStatus.OK, again[0]


def test_a_trial_sent_the_first_time_asks_the_scheduler_nothing_and_is_still_marked_as_run(client: Client) -> None:
    """Its key was never handed out, so it cannot have run: no ``event_is_set`` round trip per trial (a trial sent
    again, by a runner that ended or died, still asks: the kill test above)."""
    scheduler = client.cluster.scheduler  # type: ignore[attr-defined]
    asked: list[str] = []
    original = scheduler.handlers["event_is_set"]

    def counting(name: Any = None) -> Any:
        asked.append(str(name))
        return original(name=name)

    scheduler.handlers["event_is_set"] = counting
    executor = DaskExecutor(client, "runners-f")
    try:
        for number in range(6):
            executor.submit(TrialRequest(number, _fit, _config(number)))
        done, _ = _drain(executor, set(range(6)))
    finally:
        executor.close()
        scheduler.handlers["event_is_set"] = original
    assert {o.status for o in done.values()} == {TrialStatus.OK}
    assert [name for name in asked if "-trial-" in name] == []
    events = scheduler.extensions["events"]._events
    deadline = time.monotonic() + 10
    while sum(1 for name, e in list(events.items()) if "-trial-" in name and e.is_set()) < 6:
        assert time.monotonic() < deadline, sorted(events)
        time.sleep(0.05)


def test_a_batch_of_short_trials_goes_to_one_runner_as_one_item_with_one_mark(client: Client) -> None:
    """Trials the dispatcher batches (each shorter than a message's round trip) run one after another in one runner,
    under one first-run key, as one task would have run them; each still starts, reports and ends on its own."""
    scheduler = client.cluster.scheduler  # type: ignore[attr-defined]
    events = scheduler.extensions["events"]._events
    executor = DaskExecutor(client, "runners-g")
    try:
        executor.submit_batch([TrialRequest(n, _fit, _config(n, sleep=0.0)) for n in range(6)])
        done, seen = _drain(executor, set(range(6)))
    finally:
        executor.close()
    assert {n: (o.status, o.metrics["score"]) for n, o in done.items()} == {n: (TrialStatus.OK, n) for n in range(6)}
    assert len({o.worker for o in done.values()}) == 1  # one runner took the whole batch
    assert [e.number for e in seen if isinstance(e, Started)] == list(range(6))  # in order
    assert sorted((e.number, e.step) for e in seen if isinstance(e, Report)) == [
        (n, s) for n in range(6) for s in (1, 2)
    ]
    deadline = time.monotonic() + 10
    while not (marks := sorted(name for name, e in list(events.items()) if "runners-g-trial-" in name and e.is_set())):
        assert time.monotonic() < deadline, "the batch was never marked as run"
        time.sleep(0.05)
    assert len(marks) == 1 and marks[0].startswith("runners-g-trial-0-"), marks  # one mark: the batch's key


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_batch_cut_by_its_workers_restart_ends_lost_without_running_its_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch shares one first-run mark, as a batch task does: killing its first (long) trial restarts the worker;
    the trial ends cancelled, and the batch's other trials, sent again, find the mark and end lost (the controller's
    retry policy decides) without running, not twice and not silently dropped."""
    monkeypatch.syspath_prepend(str(HERE))
    entry = "runner_trainers:counted_fit"
    load_trainer(entry, [HERE])
    runs = tmp_path / "runs.txt"
    options = {"runs": str(runs), "sleep": 0.05, "long": 60, "long_trials": [0]}
    with _nanny_cluster(1) as procs:
        executor = DaskExecutor(procs, "runners-batch-kill")
        try:
            executor.submit_batch([TrialRequest(n, entry, _config(n, **options)) for n in range(4)])
            deadline = time.monotonic() + 60
            worker = ""
            while not worker:  # its first report: it has written its line in the runs file
                assert time.monotonic() < deadline, "trial 0 never reported"
                worker = next((e.worker for e in executor.events(0.5) if isinstance(e, Report) and e.number == 0), "")
            assert executor.kill(0, worker)
            done, _ = _drain(executor, set(range(4)), timeout=120)
        finally:
            executor.close()
    assert done[0].status == TrialStatus.CANCELLED, done[0]
    assert {n: done[n].status for n in (1, 2, 3)} == {n: TrialStatus.LOST for n in (1, 2, 3)}, done
    assert all("batch" in done[n].error for n in (1, 2, 3)), done[1].error
    # each line: a trial's number and the pid of the worker process that ran it (a flake names where trial 1 ran)
    assert [line.split()[0] for line in runs.read_text().splitlines()] == ["0"], (runs.read_text(), done)
