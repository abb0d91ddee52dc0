"""The journal's snapshot (search.store.snapshot): readers and the controller open a big journal from it, replay
only the lines after it, ignore one that does not match, and lose nothing when the writer is killed -9 while
it writes one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.storages.journal import JournalFileBackend, JournalStorage
from optuna.trial import TrialState, create_trial

from search.store import snapshot
from search.store.journal import ControllerJournalStorage, SnapshotJournalStorage
from search.store.storage import open_storage

ROOT = Path(__file__).resolve().parents[3]
X = FloatDistribution(0.0, 1.0)


@pytest.fixture(autouse=True)
def _small_snapshots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot, "MIN_LINES", 20)


def _add(study: optuna.Study, start: int, n: int) -> None:
    for i in range(start, start + n):
        study.add_trial(
            create_trial(
                state=TrialState.COMPLETE,
                value=i / 7,
                params={"x": (i % 97) / 97},
                distributions={"x": X},
                intermediate_values={1: i / 3, 2: i / 5},
            )
        )


def _writer(path: Path, create: bool = False) -> tuple[ControllerJournalStorage, optuna.Study]:
    storage = open_storage(f"journal:{path}", writer=True, create=create)
    assert isinstance(storage, ControllerJournalStorage)
    if create:
        study = optuna.create_study(study_name="s", storage=storage)
    else:
        study = optuna.load_study(study_name="s", storage=storage)
    return storage, study


def _replayed(path: Path) -> list[tuple]:
    """Every trial as plain Optuna replays the whole journal (no snapshot)."""
    study = optuna.load_study(study_name="s", storage=JournalStorage(JournalFileBackend(str(path))))
    return [(t.number, t.state, t.value, t.params, t.intermediate_values) for t in study.get_trials()]


def _read(path: Path) -> tuple[SnapshotJournalStorage, list[tuple]]:
    storage = open_storage(f"journal:{path}")
    assert isinstance(storage, SnapshotJournalStorage)
    study = optuna.load_study(study_name="s", storage=storage)
    return storage, [(t.number, t.state, t.value, t.params, t.intermediate_values) for t in study.get_trials()]


def test_a_reader_starts_from_the_snapshot_and_replays_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "study.journal"
    storage, study = _writer(path, create=True)
    _add(study, 0, 40)
    storage.flush()  # due: written after the flush
    assert snapshot.snapshot_path(path).exists()
    _add(study, 40, 2)
    storage.flush()  # 2 trials more: not due yet
    lines = sum(1 for _ in open(path, "rb"))
    reader, trials = _read(path)
    assert 0 < reader._snapshot_lines < lines  # started from the snapshot, replayed the lines after it
    assert trials == _replayed(path) and len(trials) == 42
    assert storage.snapshot() and _read(path)[0]._snapshot_lines == lines  # the final one covers everything


def test_the_controllers_flush_writes_a_due_snapshot_at_most_every_min_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "study.journal"
    storage, study = _writer(path, create=True)
    _add(study, 0, 40)
    storage.flush()  # the first one: written at once
    first = storage._snapshot_lines
    assert first > 0
    _add(study, 40, 40)  # the journal doubled: due again
    storage.flush()
    assert storage._snapshot_lines == first  # but not MIN_SECONDS after the last: none yet
    monkeypatch.setattr(snapshot, "MIN_SECONDS", 0.0)
    storage.flush()
    assert storage._snapshot_lines > first  # due and spaced: written
    assert _read(path)[1] == _replayed(path) and len(_replayed(path)) == 80


def test_the_controller_reopens_from_the_snapshot_and_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "study.journal"
    storage, study = _writer(path, create=True)
    _add(study, 0, 40)
    storage.snapshot()
    again, study = _writer(path)
    assert again._snapshot_lines > 0
    _add(study, 40, 5)
    again.flush()
    assert _read(path)[1] == _replayed(path) and len(_replayed(path)) == 45


def test_a_snapshot_that_does_not_match_the_journal_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "study.journal"
    storage, study = _writer(path, create=True)
    _add(study, 0, 40)
    storage.snapshot()
    kept = snapshot.snapshot_path(path).read_bytes()
    other = tmp_path / "other"
    other.mkdir()
    storage2, study2 = _writer(other / "study.journal", create=True)  # another journal, other values
    _add(study2, 100, 45)
    storage2.flush()
    os.replace(other / "study.journal", path)  # the journal replaced; the old snapshot left beside it
    snapshot.snapshot_path(path).write_bytes(kept)
    reader, trials = _read(path)
    assert reader._snapshot_lines == 0 and trials == _replayed(path) and trials[0][2] == 100 / 7
    snapshot.snapshot_path(path).write_bytes(b"not a header\n" + kept[:100])  # torn or foreign: ignored too
    assert _read(path)[1] == _replayed(path)


CHILD = """
import sys, optuna
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial
from search.store import snapshot
from search.store.storage import open_storage
snapshot.MIN_LINES = 50
storage = open_storage("journal:" + sys.argv[1], writer=True)
study = optuna.load_study(study_name="s", storage=storage)
i = len(study.get_trials())
while True:
    study.add_trial(create_trial(state=TrialState.COMPLETE, value=i / 7, params={"x": 0.5},
                                 distributions={"x": FloatDistribution(0.0, 1.0)}))
    storage.snapshot()  # flushes first: trial i is durable when this returns
    print(i, flush=True)
    i += 1
"""


@pytest.mark.slow
def test_kill_9_while_a_snapshot_is_written_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "study.journal"
    storage, study = _writer(path, create=True)
    _add(study, 0, 3000)  # a snapshot of some megabytes: its write takes a while
    storage.snapshot()
    tmp_glob = f"{snapshot.snapshot_path(path).name}*.tmp-*"  # the snapshot file's or a segment's
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    caught = False
    try:
        deadline = time.monotonic() + 120
        assert child.stdout is not None
        child.stdout.readline()  # it runs, and writes snapshots in a loop
        while time.monotonic() < deadline and not caught:
            caught = any(tmp_path.glob(tmp_glob))  # a snapshot being written now
        os.kill(child.pid, signal.SIGKILL)
        durable = [int(line) for line in child.stdout.read().split()]
    finally:
        child.kill()
        child.wait(timeout=30)
    assert caught, "no snapshot was seen being written within 2 minutes"
    trials = _read(path)[1]
    assert trials == _replayed(path)  # the snapshot, whichever survived, agrees with the journal
    numbers = {t[0] for t in trials}
    assert set(range(3000)) <= numbers and (not durable or max(durable) in numbers)  # nothing durable lost
    again, study = _writer(path)  # the controller opens it again and goes on
    _add(study, len(trials), 1)
    again.snapshot()
    assert len(_read(path)[1]) == len(trials) + 1 and not any(tmp_path.glob(tmp_glob))


def _segments(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{snapshot.snapshot_path(path).name}.seg-*"))


def test_each_snapshot_writes_only_the_trials_finished_since_the_last_one(tmp_path: Path) -> None:
    path = tmp_path / "study.journal"
    storage, study = _writer(path, create=True)
    _add(study, 0, 40)
    running = study.ask()  # unfinished: kept in the snapshot file itself, not sealed in a segment
    assert storage.snapshot()
    first = _segments(path)
    assert len(first) == 1 and [s.trials for s in storage._segments] == [40]
    head = snapshot.snapshot_path(path).stat().st_size
    _add(study, 40, 30)
    study.tell(running, 0.5)
    assert storage.snapshot()
    assert [s.trials for s in storage._segments] == [40, 31] and _segments(path)[0] == first[0]  # kept as it was
    assert snapshot.snapshot_path(path).stat().st_size < head * 2  # the finished trials are not in it again
    reader, trials = _read(path)
    assert reader._snapshot_lines > 0 and reader._sealed == storage._sealed
    assert trials == _replayed(path) and len(trials) == 71 and trials[40][2] == 0.5


def test_a_missing_or_altered_segment_makes_a_reader_replay_the_whole_journal(tmp_path: Path) -> None:
    path = tmp_path / "study.journal"
    storage, study = _writer(path, create=True)
    _add(study, 0, 40)
    storage.snapshot()
    _add(study, 40, 20)
    storage.snapshot()
    last = _segments(path)[-1]
    kept = last.read_bytes()
    last.write_bytes(kept[:-1] + bytes([kept[-1] ^ 1]))  # same size, one bit flipped
    reader, trials = _read(path)
    assert reader._snapshot_lines == 0 and trials == _replayed(path) and len(trials) == 60
    last.unlink()
    reader, trials = _read(path)
    assert reader._snapshot_lines == 0 and trials == _replayed(path)
    last.write_bytes(kept)
    assert _read(path)[0]._snapshot_lines > 0  # whole again: used again


def test_past_the_segment_limit_a_snapshot_merges_them_and_removes_the_old_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import search.store.journal as journal

    monkeypatch.setattr(journal, "MAX_SEGMENTS", 2)
    path = tmp_path / "study.journal"
    storage, study = _writer(path, create=True)
    for start in (0, 40):
        _add(study, start, 40 if start == 0 else 5)
        storage.snapshot()
    assert len(_segments(path)) == 2
    _add(study, 45, 5)
    assert storage.snapshot()
    assert len(_segments(path)) == 1 and [s.trials for s in storage._segments] == [50]
    assert _read(path)[1] == _replayed(path) and len(_replayed(path)) == 50


def test_the_controller_removes_segments_no_snapshot_lists_and_seals_on_from_the_restored_ones(
    tmp_path: Path,
) -> None:
    path = tmp_path / "study.journal"
    storage, study = _writer(path, create=True)
    _add(study, 0, 40)
    storage.snapshot()
    orphan = Path(f"{snapshot.snapshot_path(path)}.seg-999999999999")  # a writer killed before listing it
    orphan.write_bytes(b"half")
    again, study = _writer(path)
    assert not orphan.exists() and again._sealed == storage._sealed
    _add(study, 40, 10)
    assert again.snapshot()
    assert [s.trials for s in again._segments] == [40, 10]
    assert _read(path)[1] == _replayed(path)
