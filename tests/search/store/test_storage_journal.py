"""The default storage: Optuna's journal file, written by the controller with group commit."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import optuna
import pytest
from optuna.storages.journal import JournalFileBackend, JournalStorage

from search.store.journal import GroupCommitJournal, repair_journal
from search.store.storage import flusher, open_storage

DIST = {"x": optuna.distributions.FloatDistribution(0.0, 1.0)}


def lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def test_writes_wait_for_flush_and_reads_see_them_before(tmp_path: Path) -> None:
    path = tmp_path / "study.journal"
    storage = open_storage(f"journal:{path}", writer=True)
    study = optuna.create_study(study_name="s", storage=storage)
    trial = study.ask(DIST)
    trial.report(0.5, 1)
    study.tell(trial, 0.25)
    assert study.trials[0].value == 0.25  # the controller sees its own writes at once
    assert lines(path) == 0  # nothing written yet: one group per loop iteration
    assert flusher(storage)() > 0
    assert lines(path) > 0
    plain = optuna.load_study(study_name="s", storage=JournalStorage(JournalFileBackend(str(path))))
    assert plain.trials[0].value == 0.25 and plain.trials[0].intermediate_values == {1: 0.5}


def test_a_flush_interrupted_mid_write_is_cut_back_and_written_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "study.journal"
    backend = GroupCommitJournal(path)
    study = optuna.create_study(study_name="s", storage=JournalStorage(backend))
    study.tell(study.ask(DIST), 0.1)
    backend.flush()
    study.tell(study.ask(DIST), 0.2)
    real_write = os.write

    def half_then_ctrl_c(fd: int, data: bytes) -> int:
        monkeypatch.setattr(os, "write", real_write)
        real_write(fd, bytes(data[: len(data) // 2]))
        raise KeyboardInterrupt  # Ctrl-C lands in the middle of the write

    monkeypatch.setattr(os, "write", half_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        backend.flush()
    assert not path.read_bytes().endswith(b"\n")  # torn on disk for now
    study.tell(study.ask(DIST), 0.3)
    assert backend.flush() > 0  # the controller's final flush
    plain = optuna.load_study(study_name="s", storage=JournalStorage(JournalFileBackend(str(path))))
    assert [t.value for t in plain.trials] == [0.1, 0.2, 0.3]


def test_a_torn_last_line_is_cut_when_the_controller_opens_the_file(tmp_path: Path) -> None:
    path = tmp_path / "study.journal"
    study = optuna.create_study(study_name="s", storage=JournalStorage(GroupCommitJournal(path)))
    for value in (0.1, 0.2):
        trial = study.ask(DIST)
        study.tell(trial, value)
    study._storage._backend.flush()
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"op_code": 6, "trial_id": 1, "sta')  # killed mid-write
    assert repair_journal(path) == whole.count(b"\n")
    assert path.read_bytes() == whole
    reopened = optuna.load_study(study_name="s", storage=open_storage(f"journal:{path}", writer=True))
    trial = reopened.ask(DIST)
    reopened.tell(trial, 0.3)
    reopened._storage._backend.flush()
    plain = optuna.load_study(study_name="s", storage=JournalStorage(JournalFileBackend(str(path))))
    assert [t.value for t in plain.trials] == [0.1, 0.2, 0.3]


def test_readers_never_modify_the_file(tmp_path: Path) -> None:
    path = tmp_path / "study.journal"
    writer = open_storage(f"journal:{path}", writer=True)
    study = optuna.create_study(study_name="s", storage=writer)
    study.tell(study.ask(DIST), 0.5)
    flusher(writer)()
    path.write_bytes(path.read_bytes() + b'{"partial')  # the writer is mid-append
    before = path.read_bytes()
    reader = open_storage(f"journal:{path}")
    assert len(optuna.load_study(study_name="s", storage=reader).trials) == 1
    assert path.read_bytes() == before


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(shutil.which("optuna-dashboard") is None, reason="optuna-dashboard is not installed")
@pytest.mark.timeout(60)
def test_optuna_dashboard_opens_the_campaign_journal(tmp_path: Path) -> None:
    path = tmp_path / "study.journal"
    storage = open_storage(f"journal:{path}", writer=True)
    study = optuna.create_study(study_name="dash", storage=storage)
    for i in range(3):
        trial = study.ask(DIST)
        trial.report(0.1 * i, 1)
        study.tell(trial, trial.params["x"])
    flusher(storage)()
    port = free_port()
    proc = subprocess.Popen(
        [shutil.which("optuna-dashboard") or "optuna-dashboard", str(path), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 40
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=2) as response:
                    body = json.load(response)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        assert [s["study_name"] for s in body["study_summaries"]] == ["dash"]
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_the_controller_storage_asks_without_scanning_yet_still_pops_enqueued_trials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from optuna.storages.journal._storage import JournalStorageReplayResult

    storage = open_storage(f"journal:{tmp_path / 'study.journal'}", writer=True)
    study = optuna.create_study(study_name="s", storage=storage)
    study.tell(study.ask(DIST), 0.1)  # the first ask scans once: no WAITING trial
    scans = []
    real = JournalStorageReplayResult.get_all_trials
    monkeypatch.setattr(
        JournalStorageReplayResult,
        "get_all_trials",
        lambda self, study_id, states: scans.append(states) or real(self, study_id, states),
    )
    for _ in range(5):
        study.tell(study.ask(DIST), 0.2)
    assert not any(states == (optuna.trial.TrialState.WAITING,) for states in scans)
    study.enqueue_trial({"x": 0.75})
    assert study.ask(DIST).params == {"x": 0.75}  # an enqueued trial is still found
    assert study.ask(DIST).params != {"x": 0.75}


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_each_flush_writes_but_fsyncs_at_most_once_per_sync_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flush puts its entries in the file (a controller kill loses nothing flushed); the fsync, which only a
    machine crash needs, waits until ``sync_interval`` has passed since the last one, or ``sync=True``."""
    path, clock, synced = tmp_path / "study.journal", _Clock(), []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd)))
    backend = GroupCommitJournal(path, sync_interval=0.2, clock=clock)
    study = optuna.create_study(study_name="s", storage=JournalStorage(backend))
    for step in range(5):  # five loop iterations within 0.2 s: each writes, only the first fsyncs
        study.tell(study.ask(DIST), 0.1 * step)
        backend.flush()
        assert lines(path) == len(list(backend.read_logs(0)))  # in the file at once
        clock.now += 0.03
    assert synced == [str(path)]
    clock.now += 0.1  # 0.25 s since that fsync: the next flush syncs what is unsynced, with nothing new to write
    assert backend.flush() == 0 and len(synced) == 2
    assert backend.flush() == 0 and len(synced) == 2  # nothing unsynced: no fsync
    study.tell(study.ask(DIST), 0.9)
    backend.flush(sync=True)  # a decision about to be acted on: synced now
    assert len(synced) == 3 and backend.fsyncs == 3
    plain = optuna.load_study(study_name="s", storage=JournalStorage(JournalFileBackend(str(path))))
    assert len(plain.trials) == 6


def test_sync_interval_zero_fsyncs_every_flush_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    backend = GroupCommitJournal(tmp_path / "study.journal", sync_interval=0.0, clock=_Clock())
    study = optuna.create_study(study_name="s", storage=JournalStorage(backend))
    for _ in range(3):
        study.tell(study.ask(DIST), 0.5)
        backend.flush()
    assert backend.fsyncs == 3
    with pytest.raises(ValueError, match=r"sync_interval=-1: must be a number of seconds >= 0"):
        GroupCommitJournal(tmp_path / "other.journal", sync_interval=-1)


def test_the_campaign_syncs_a_stop_decision_before_it_is_sent(tmp_path: Path) -> None:
    """``flusher(storage, sync=True)``, which the campaign calls before it sends a stop request, fsyncs even
    within the interval; the plain flusher does not."""
    storage = open_storage(f"journal:{tmp_path / 'study.journal'}", writer=True)
    study = optuna.create_study(study_name="s", storage=storage)
    backend = storage._backend
    assert isinstance(backend, GroupCommitJournal)
    backend._clock = _Clock()  # noqa: SLF001 - time stands still: the interval never runs out here
    study.tell(study.ask(DIST), 0.5)
    flusher(storage)()
    first = backend.fsyncs
    study.tell(study.ask(DIST), 0.6)
    flusher(storage)()
    assert backend.fsyncs == first  # within SYNC_INTERVAL of the last one
    study.tell(study.ask(DIST), 0.7)
    flusher(storage, sync=True)()
    assert backend.fsyncs == first + 1


def test_attributes_written_together_leave_the_journal_and_the_state_that_one_by_one_leaves(tmp_path: Path) -> None:
    from optuna.exceptions import UpdateFinishedTrialError

    from search.store.records import write_attrs

    attrs = {"seed": 3, "config": {"params": {"x": 0.5}, "nested": [1, {"a": 2}]}, "width": 1, "sampler_saw": 0}
    studies = {}
    for how in ("together", "one by one"):
        path = tmp_path / how / "study.journal"
        path.parent.mkdir()
        storage = open_storage(f"journal:{path}", writer=True)
        sampler = optuna.samplers.RandomSampler(seed=1)
        study = studies[how] = optuna.create_study(study_name="s", storage=storage, sampler=sampler)
        trial = study.ask(DIST)
        if how == "together":
            write_attrs(trial, **attrs)
            write_attrs(trial, worker="w", seed=4)  # a later value wins, as set_user_attr's does
        else:
            for key, value in [*attrs.items(), ("worker", "w"), ("seed", 4)]:
                trial.set_user_attr(key, value)
        assert trial.user_attrs == {**attrs, "worker": "w", "seed": 4}  # the trial's own view
        study.tell(trial, 0.5)
        with pytest.raises(UpdateFinishedTrialError):  # as Optuna refuses it, after writing what replay ignores
            if how == "together":
                write_attrs(trial, seed=5, width=2)
            else:
                trial.set_user_attr("seed", 5)
        flusher(storage, sync=True)()
    files = [(tmp_path / how / "study.journal").read_text().splitlines() for how in ("together", "one by one")]
    dropped = ("worker_id", "datetime_start", "datetime_complete")
    strip = [[{k: v for k, v in json.loads(line).items() if k not in dropped} for line in f] for f in files]
    assert strip[0][:-2] == strip[1][:-1]  # the same entries in order, then the refused ones
    assert strip[0][-2:] == [{"op_code": 8, "trial_id": 0, "user_attr": a} for a in ({"seed": 5}, {"width": 2})]
    fresh = optuna.load_study(
        study_name="s", storage=JournalStorage(JournalFileBackend(str(tmp_path / "together" / "study.journal")))
    )
    mine = studies["together"].trials[0]
    assert fresh.trials[0].user_attrs == mine.user_attrs == studies["one by one"].trials[0].user_attrs
    assert studies["together"]._storage._replay_result.log_number_read == len(files[0])  # read back, all counted


def test_parameters_set_by_the_controller_leave_the_journal_the_state_and_the_errors_that_optuna_leaves(
    tmp_path: Path,
) -> None:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    log_x = FloatDistribution(1e-3, 1.0, log=True)
    steps = [  # (trial, name, internal value, distribution, what Optuna raises)
        (1, "x", 0.01, log_x, None),
        (1, "c", 1, CategoricalDistribution(["a", "b", None]), None),
        (2, "n", 4, IntDistribution(0, 8, step=2), None),
        (2, "x", 0.5, FloatDistribution(1e-2, 2.0, log=True), None),  # another range: compatible
        (0, "x", 0.2, log_x, None),  # an earlier trial: it becomes the first that has x
        (0, "c", 0, CategoricalDistribution(["a", "b"]), ValueError),  # other choices: refused
        (3, "n", 1.0, FloatDistribution(0.0, 8.0), ValueError),  # another kind of distribution: refused
        (3, "x", 0.5, FloatDistribution(0.0, 2.0), ValueError),  # not on a log scale: refused
        (3, "c", 2, CategoricalDistribution(["a", "b", None]), None),
        (1, "y", 0.3, FloatDistribution(0.0, 1.0), UpdateFinishedTrialError),  # trial 1 is told below
        (99, "x", 0.1, log_x, KeyError),
    ]
    storages = {
        "controller": open_storage(f"journal:{tmp_path / 'controller.journal'}", writer=True),
        "optuna": JournalStorage(JournalFileBackend(str(tmp_path / "optuna.journal"))),
    }
    for storage in storages.values():
        study_id = storage.create_new_study([optuna.study.StudyDirection.MINIMIZE], "s")
        for _ in range(4):
            storage.create_new_trial(study_id)
        for trial_id, name, value, distribution, raises in steps:
            if name == "y":
                storage.set_trial_state_values(1, TrialState.COMPLETE, [1.0])
            if raises is None:
                storage.set_trial_param(trial_id, name, value, distribution)
            else:
                with pytest.raises(raises):
                    storage.set_trial_param(trial_id, name, value, distribution)
        flusher(storage, sync=True)()
    mine, theirs = (s.get_all_trials(0, deepcopy=False) for s in storages.values())
    assert [(t.params, t.distributions) for t in mine] == [(t.params, t.distributions) for t in theirs]
    assert mine[0].params == {"x": 0.2} and mine[3].params == {"c": None}
    dropped = ("worker_id", "datetime_start", "datetime_complete")
    files = [(tmp_path / f"{name}.journal").read_text().splitlines() for name in storages]
    assert [[{k: v for k, v in json.loads(line).items() if k not in dropped} for line in f] for f in files][0] == [
        {k: v for k, v in json.loads(line).items() if k not in dropped} for line in files[1]
    ]
    replayed = JournalStorage(JournalFileBackend(str(tmp_path / "controller.journal"))).get_all_trials(0)
    assert [(t.params, t.distributions) for t in replayed] == [(t.params, t.distributions) for t in mine]
