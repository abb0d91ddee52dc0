"""Optuna's journal file, written with group commit: one append per controller loop, an fsync at most every
``SYNC_INTERVAL`` seconds.

Optuna's ``JournalFileBackend`` takes a file lock and fsyncs on every storage call
(about 23 per trial with 10 reports). :class:`GroupCommitJournal` keeps the
appended log entries in memory, serves reads from file plus buffer (the
controller is the only writer), and writes them out with one ``write`` when
:meth:`~GroupCommitJournal.flush` is called, which the campaign does once per loop iteration.
The file stays Optuna's own format: ``optuna.load_study`` with
``JournalStorage(JournalFileBackend(path))`` and optuna-dashboard read it.

Two kinds of failure, two guarantees:

- **The controller dies** (kill -9, an OOM kill, a crash): what a flush wrote is in the
  kernel's page cache, so it is in the file; only the entries of the loop iteration
  under way are lost. The trials they concerned are still RUNNING in the file, and
  ``resume`` re-runs them from their checkpoints.
- **The machine dies** (power, a kernel panic): what was not yet fsynced may be lost.
  A flush fsyncs when ``SYNC_INTERVAL`` has passed since the last fsync, so this loses
  at most the last ``SYNC_INTERVAL`` seconds (plus one loop iteration), as PostgreSQL
  does with ``synchronous_commit = off``. A decision that is acted on outside the
  controller (a stop request) is fsynced before it is sent: ``flush(sync=True)``.
  An fsync per loop iteration (about one event each) was 13% of a 1,024-worker
  campaign's time (bench/NOTES.md), and on a network file system an fsync costs
  milliseconds.

A torn last line from a crash mid-write is cut off when the file is opened again;
a write interrupted in this process (Ctrl-C lands in the middle of it) is cut back
and written again by the next flush.

The controller is the only writer (its folder lock guarantees it), so the flush
appends without Optuna's lock file: no symlink, rename and unlink per flush, and
no lock left half-released by an interrupt.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Container, Generator, Mapping
from pathlib import Path
from typing import Any

from optuna.distributions import (
    BaseDistribution,
    check_distribution_compatibility,
    distribution_to_json,
    json_to_distribution,
)
from optuna.storages.journal import BaseJournalBackend, JournalFileBackend, JournalStorage
from optuna.trial import FrozenTrial, TrialState

from search.compat import optuna_private as op
from search.compat.optuna_private import BaseJournalSnapshot  # public in optuna.storages.journal only as a base
from search.store.heap import gc_paused
from search.store.snapshot import (
    MAX_SEGMENTS,
    Segment,
    due,
    read_segments,
    read_snapshot,
    remove_stale,
    spaced,
    write_segment,
    write_snapshot,
)

__all__ = [
    "GroupCommitJournal",
    "ControllerJournalStorage",
    "SnapshotJournalStorage",
    "PublicJournalStorage",
    "repair_journal",
    "SYNC_INTERVAL",
]

log = logging.getLogger(__name__)

_encode = json.JSONEncoder(separators=(",", ":")).encode  # one encoder: json.dumps builds one per call with these
SYNC_INTERVAL = 0.2  # seconds: the longest a flushed entry waits for its fsync (what a power cut may lose)


def repair_journal(path: Path) -> int:
    """Cut a torn last line (no newline: a crash mid-write); return the number of whole lines."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end != len(data):
        with open(path, "r+b") as fh:
            fh.truncate(end)
            fh.flush()
            os.fsync(fh.fileno())
    return data[:end].count(b"\n")


class GroupCommitJournal(BaseJournalBackend):
    """A journal file backend for a single writer that batches appends until :meth:`flush`."""

    def __init__(
        self, path: str | Path, sync_interval: float = SYNC_INTERVAL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not sync_interval >= 0:
            raise ValueError(
                f"sync_interval={sync_interval!r}: must be a number of seconds >= 0 (0: fsync every flush)"
            )
        self._path = Path(path)
        self._persisted = repair_journal(self._path)
        self._size = self._path.stat().st_size if self._path.exists() else 0  # bytes of whole, flushed lines
        self._inner = JournalFileBackend(str(self._path))
        self._buffer: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._sync_interval, self._clock = sync_interval, clock
        self._synced_at = -math.inf  # when the last fsync was (clock seconds)
        self._unsynced = False  # written since that fsync
        self.fsyncs = 0  # how many (for the bench)

    @property
    def path(self) -> Path:
        return self._path

    @property
    def persisted(self) -> tuple[int, int]:
        """(whole lines, bytes) in the file: what a snapshot may cover."""
        with self._lock:
            return self._persisted, self._size

    def start_at(self, lines: int, size: int) -> None:
        """A snapshot covers the first ``lines`` lines (``size`` bytes): read on from there."""
        _seek_table(self._inner, lines, size)

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        with self._lock:
            self._buffer.extend(logs)

    def read_logs(self, log_number_from: int) -> Generator[dict[str, Any], None, None]:
        with self._lock:
            persisted = self._persisted
            # Optuna reads back after each of its writes: only the entries from there on are copied, not the
            # whole buffer (at 10,000 workers a loop iteration buffers thousands: the copy was quadratic)
            buffered = self._buffer[max(0, log_number_from - persisted) :]
        if log_number_from < persisted:
            for i, log in enumerate(self._inner.read_logs(log_number_from)):
                if log_number_from + i >= persisted:
                    break
                yield log
        yield from buffered

    def flush(self, sync: bool = False) -> int:
        """Write the buffered entries with one write; return how many. Then fsync the file if ``sync``, or if
        something written is unsynced and ``sync_interval`` seconds have passed since the last fsync.

        If the write is interrupted (an exception, Ctrl-C included), the entries stay
        buffered and the next flush first cuts the file back to its last whole flush.
        """
        with self._lock:
            logs = self._buffer
            if logs:
                data = ("\n".join(_encode(log) for log in logs) + "\n").encode("utf-8")
                self._append(data)
                self._buffer = []
                self._persisted += len(logs)
                self._size += len(data)
                self._unsynced = True
            if self._unsynced and (sync or self._clock() - self._synced_at >= self._sync_interval):
                self._fsync()
        return len(logs)

    def _append(self, data: bytes) -> None:
        fd = os.open(self._path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, self._size)  # undo a write cut short earlier in this process
            os.lseek(fd, self._size, os.SEEK_SET)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)

    def _fsync(self) -> None:
        fd = os.open(self._path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._unsynced, self._synced_at = False, self._clock()
        self.fsyncs += 1


def _seek_table(backend: JournalFileBackend, lines: int, size: int) -> None:
    """Let Optuna's file backend seek straight to line ``lines`` (its table of line offsets; without it the
    backend would scan every line before, which is correct, only slower)."""
    op.seek_table(backend, lines, size)


class _Restoring(BaseJournalBackend, BaseJournalSnapshot):
    """Hands Optuna's ``JournalStorage.__init__`` a snapshot to start from, then is replaced by the backend it
    wraps: were the backend itself a ``BaseJournalSnapshot``, Optuna would pickle the whole replay result every
    100 trials (quadratic at 100,000 trials)."""

    def __init__(self, backend: BaseJournalBackend, snapshot: bytes) -> None:
        self._backend, self._snapshot = backend, snapshot

    def read_logs(self, log_number_from: int) -> Generator[dict[str, Any], None, None]:
        yield from self._backend.read_logs(log_number_from)

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        self._backend.append_logs(logs)

    def load_snapshot(self) -> bytes | None:
        return self._snapshot

    def save_snapshot(self, snapshot: bytes) -> None:
        return None


class SnapshotJournalStorage(JournalStorage):
    """Optuna's journal storage, opened from the journal's snapshot when it has a matching one
    (:mod:`search.store.snapshot`): only the lines after it are replayed. ``path``: the journal file."""

    def __init__(self, backend: BaseJournalBackend, path: str | Path | None = None) -> None:
        path = Path(path) if path is not None else getattr(backend, "path", None)
        found = read_snapshot(path) if path is not None else None
        self._snapshot_lines = 0
        self._segments: tuple[Segment, ...] = ()  # the snapshot's segments, as restored (or written since)
        self._sealed: set[int] = set()  # the trial ids they hold
        self._restoring = (path, found)  # read by restore_replay_result, which Optuna's __init__ calls
        self._restored = False  # whether it did restore the snapshot (else Optuna replayed the whole journal)
        if found is None:
            with gc_paused():
                super().__init__(backend)
            return
        if isinstance(backend, GroupCommitJournal):
            backend.start_at(found.lines, found.size)
        elif isinstance(backend, JournalFileBackend):
            _seek_table(backend, found.lines, found.size)
        with gc_paused():
            super().__init__(_Restoring(backend, found.head))
        self._backend = backend
        if self._restored:
            self._snapshot_lines = found.lines

    def restore_replay_result(self, snapshot: bytes) -> None:
        """Optuna's restore of the pickled state, then the finished trials of the snapshot's segments put back
        (a segment that cannot be read: the state is dropped, and the whole journal replayed)."""
        super().restore_replay_result(snapshot)
        path, found = self._restoring
        if found is None or path is None or self._replay_result.log_number_read != found.lines:
            return  # Optuna could not unpickle it: it replays from the start
        trials = read_segments(path, found.segments)
        if trials is None:
            self._replay_result = op.new_replay_state(self)
            return
        op.replay_trials(self._replay_result).update(trials)
        self._segments, self._sealed, self._restored = found.segments, set(trials), True


class PublicJournalStorage(JournalStorage):
    """Optuna's journal storage on the group-commit backend through Optuna's public API alone: what the writer opens
    where the check of the private journal API failed (:mod:`search.compat.optuna_private`). Optuna replays each
    entry it appends, and no snapshot is written: slower at 10,000s of trials, the same file."""

    def __init__(self, backend: GroupCommitJournal) -> None:
        super().__init__(backend)
        self.group_commit = backend

    def flush(self, sync: bool = False) -> int:
        """The group commit (see :class:`GroupCommitJournal`)."""
        return self.group_commit.flush(sync)

    def snapshot(self) -> bool:
        """No snapshot on this path (it pickles Optuna's private replay state)."""
        return False


class ControllerJournalStorage(SnapshotJournalStorage):
    """Optuna's journal storage for the single writer, with ``ask`` in constant time.

    ``Study.ask`` first looks for an enqueued (WAITING) trial by filtering every
    trial of the study: at 10,000 trials that scan is most of the controller's
    time per trial. The single writer knows whether a WAITING trial can exist (one
    was in the file, or it created one since), so it answers that query from a flag.
    """

    def __init__(self, backend: GroupCommitJournal) -> None:
        super().__init__(backend)
        self._none_waiting: set[int] = set()  # studies known to have no WAITING trial
        self._first_holder: dict[tuple[int, str], tuple[int, str]] = {}  # (study, param) -> (trial id, its JSON)
        self._decoded: dict[str, BaseDistribution] = {}  # a distribution's JSON -> the distribution replay makes
        self._encoded: dict[int, tuple[BaseDistribution, str]] = {}  # id -> (the distribution, its JSON)
        self._snapshot_at = -math.inf  # when this writer last wrote a snapshot (time.monotonic)
        remove_stale(backend.path, self._segments)  # what a writer killed while writing a snapshot left

    @property
    def _writer(self) -> GroupCommitJournal:
        """The backend, as the group-commit journal this storage was opened on."""
        assert isinstance(self._backend, GroupCommitJournal)
        return self._backend

    def flush(self, sync: bool = False) -> int:
        """The group commit (see :class:`GroupCommitJournal`; ``sync``: fsync now), then a snapshot when one is
        due: the journal grew by a tenth since the last, and ``snapshot.MIN_SECONDS`` have passed (:func:`spaced`). A snapshot
        pickles every unfinished trial (0.3 s with 10,000 running); while a journal is small, a tenth of it is
        written every few seconds, and a snapshot each time cost a tenth of the controller's time per trial at
        10,000 simulated workers. A crash then leaves at most that long of trials to replay, besides the tenth."""
        written = self._writer.flush(sync)
        lines, _size = self._writer.persisted
        if due(lines, self._snapshot_lines) and spaced(self._snapshot_at, time.monotonic()):
            self.snapshot()
        return written

    def snapshot(self) -> bool:
        """Flush, then write the snapshot of everything in the file, if it is big enough to need one and it
        changed since the last one; return whether one was written. Its cost: the trials finished since the
        last one (a new segment) and the unfinished ones, not the whole study."""
        with self._thread_lock:  # nothing changes the replay result meanwhile
            self._writer.flush(sync=True)
            lines, size = self._writer.persisted
            state = self._replay_result
            if state.log_number_read != lines or lines == self._snapshot_lines or not due(lines, 0):
                return False
            path = self._writer.path
            try:
                segments, sealed = self._seal(state, lines)
                head = copy.copy(state)  # the state without the sealed trials: they are in the segments
                op.set_replay_trials(head, {tid: t for tid, t in op.replay_trials(state).items() if tid not in sealed})
                write_snapshot(path, head, lines, size, segments)
            except OSError as exc:  # a cache: a full disk costs readers a replay, never the campaign
                log.warning("no snapshot of %s written: %s", path, exc)
                return False
            merged = len(segments) < len(self._segments)
            self._snapshot_lines, self._segments, self._sealed = lines, segments, sealed
            self._snapshot_at = time.monotonic()
            if merged:
                remove_stale(path, segments)  # the merged segments (a reader opening one now replays instead)
        return True

    def _seal(self, state: Any, lines: int) -> tuple[tuple[Segment, ...], set[int]]:
        """The next snapshot's segments and the trial ids they hold: the current ones and a new one of the trials
        finished since, or all finished trials in one when there would be more than ``MAX_SEGMENTS``."""
        path = self._writer.path
        if len(self._segments) >= MAX_SEGMENTS:
            finished = {tid: t for tid, t in op.replay_trials(state).items() if t.state.is_finished()}
            return (write_segment(path, finished, lines),), set(finished)
        new = {
            tid: t for tid, t in op.replay_trials(state).items() if tid not in self._sealed and t.state.is_finished()
        }
        if not new:
            return self._segments, self._sealed
        return (*self._segments, write_segment(path, new, lines)), self._sealed | set(new)

    def set_trial_param(
        self, trial_id: int, param_name: str, param_value_internal: float, distribution: BaseDistribution
    ) -> None:
        """Optuna's entry, applied by the writer that appended it, as :meth:`set_trial_user_attrs` applies its own.

        Optuna reads each entry back, decodes its distribution from JSON, and walks the study from its first trial
        to the first that has the parameter, to check the new distribution against that one's. Here the decoded
        distribution is kept per JSON text, and that first holder per study and parameter. A trial that gets the
        parameter later, even an earlier one, passed the same check, and the check is an equivalence (the same
        kind, log scale and choices), so the holder found first answers as the current first would.
        The state and the errors are Optuna's (the entry is written before a check fails, as Optuna writes it)."""
        text = self._encoded_distribution(distribution)
        log = {
            "op_code": op.journal_operation("SET_TRIAL_PARAM"),
            "worker_id": self._replay_result.worker_id,
            "trial_id": trial_id,
            "param_name": param_name,
            "param_value_internal": param_value_internal,
            "distribution": text,
        }
        with self._thread_lock:
            self._sync_with_backend()  # caught up: the entry appended next is the next one read
            self._backend.append_logs([log])
            state = self._replay_result
            state.log_number_read += 1
            if not op.updatable(state, trial_id, log):
                return
            decoded = self._decoded_distribution(text)
            self._check_first_holder(state, trial_id, param_name, text, decoded)
            trials = op.replay_trials(state)
            trial = copy.copy(trials[trial_id])
            trial.params = {**trial.params, param_name: decoded.to_external_repr(param_value_internal)}
            trial.distributions = {**trial.distributions, param_name: decoded}
            trials[trial_id] = trial

    def _encoded_distribution(self, distribution: BaseDistribution) -> str:
        """``distribution_to_json``, kept per distribution object: a campaign asks with the same objects every time
        (the object is kept with its text, so its id is not reused while it is here; distributions are immutable)."""
        kept = self._encoded.get(id(distribution))
        if kept is not None and kept[0] is distribution:
            return kept[1]
        if len(self._encoded) >= 4096:
            self._encoded.clear()
        text = distribution_to_json(distribution)
        self._encoded[id(distribution)] = (distribution, text)
        return text

    def _decoded_distribution(self, text: str) -> BaseDistribution:
        decoded = self._decoded.get(text)
        if decoded is None:
            if len(self._decoded) >= 4096:  # dependent ranges make a distribution per value: keep the cache small
                self._decoded.clear()
            decoded = self._decoded[text] = json_to_distribution(text)
        return decoded

    def _check_first_holder(self, state: Any, trial_id: int, name: str, text: str, decoded: BaseDistribution) -> None:
        """Raise as Optuna does when ``decoded`` is incompatible with the parameter's distribution in the study's
        first trial that has it; with none, ``trial_id`` becomes that trial."""
        study_id = op.study_of_trial(state)[trial_id]
        key = (study_id, name)
        first = self._first_holder.get(key)
        if first is None:
            holder = next(
                (
                    t
                    for t in map(op.replay_trials(state).get, op.trials_of_study(state)[study_id])
                    if t is not None and name in t.params
                ),
                None,
            )
            if holder is not None:
                first = self._first_holder[key] = (
                    op.trial_id_in_replay(holder),
                    distribution_to_json(holder.distributions[name]),
                )
        if first is not None and first[1] != text:
            check_distribution_compatibility(self._decoded_distribution(first[1]), decoded)
        if first is None:
            self._first_holder[key] = (trial_id, text)

    def set_trial_user_attrs(self, trial_id: int, attrs: Mapping[str, Any]) -> None:
        """Several user attributes of one trial, as many ``set_trial_user_attr`` calls would set them (an entry each
        in the journal: Optuna's replay takes one key per entry), with one append and one copy of the trial.

        Optuna applies each entry it reads back by copying the trial and its attributes (about 10 µs an entry, 15
        entries a trial). The single writer knows that the entries it has just appended are the next ones to read,
        so it applies them together: the same state and the same entries. A trial it may not update (unknown, or
        finished) raises as Optuna's would, after writing the entries (as Optuna writes its one), which replay
        ignores."""
        if not attrs:
            return
        worker = self._replay_result.worker_id
        code = op.journal_operation("SET_TRIAL_USER_ATTR")
        logs = [
            {"op_code": code, "worker_id": worker, "trial_id": trial_id, "user_attr": {k: v}} for k, v in attrs.items()
        ]
        with self._thread_lock:
            self._sync_with_backend()  # caught up: the entries appended next are the next ones read
            self._backend.append_logs(logs)
            state = self._replay_result
            state.log_number_read += len(logs)
            if op.updatable(state, trial_id, logs[0]):
                trials = op.replay_trials(state)
                trial = copy.copy(trials[trial_id])
                trial.user_attrs = {**trial.user_attrs, **attrs}
                trials[trial_id] = trial

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        if template_trial is not None and template_trial.state == TrialState.WAITING:
            self._none_waiting.discard(study_id)  # enqueued
        trial_id = super().create_new_trial(study_id, template_trial)
        if template_trial is not None and template_trial.distributions:
            self._share_distributions(trial_id, template_trial)
        return trial_id

    def _share_distributions(self, trial_id: int, template: FrozenTrial) -> None:
        """A trial created from a template holds the distributions replay decoded for it alone (and its categorical
        values from their choices); the writer gives it the ones it keeps per JSON text, as :meth:`set_trial_param`
        does. Without this, 40,000 trials of six categoricals (``search.sampling.presample``) held 100 MB more."""
        with self._thread_lock:
            trial = op.replay_trials(self._replay_result).get(trial_id)
            if trial is None:
                return
            shared = {
                name: self._decoded_distribution(self._encoded_distribution(d))
                for name, d in template.distributions.items()
            }
            trial = copy.copy(trial)
            trial.params = {
                name: shared[name].to_external_repr(template.distributions[name].to_internal_repr(value))
                for name, value in template.params.items()
            }
            trial.distributions = shared
            op.replay_trials(self._replay_result)[trial_id] = trial

    def get_all_trials(
        self, study_id: int, deepcopy: bool = True, states: Container[TrialState] | None = None
    ) -> list[FrozenTrial]:
        only_waiting = states is not None and tuple(states) == (TrialState.WAITING,)  # type: ignore[arg-type]
        if only_waiting and study_id in self._none_waiting:
            return []
        trials = super().get_all_trials(study_id, deepcopy, states)
        if only_waiting and not trials:
            self._none_waiting.add(study_id)
        return trials
