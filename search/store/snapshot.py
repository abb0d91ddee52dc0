"""A compact snapshot of a journal's replayed state, so that opening a 100,000-trial journal does not replay it.

Optuna's ``JournalStorage`` rebuilds the study by replaying every log line (about 23 per trial with 10
reports): at 100,000 trials that is minutes. The snapshot (``study.journal.snapshot`` beside the journal) is
the replay result after the first ``lines`` lines, with a header that names those lines by their byte
length and a SHA-256 of the bytes just before that length. Opening the journal restores the snapshot and
replays only the lines after it.

A finished trial never changes again (Optuna's replay refuses updates to it), so the snapshot is written in
segments: each snapshot pickles the trials that finished since the last one into a new segment file
(``study.journal.snapshot.seg-<lines>``), and the snapshot file itself holds only the rest of the state (the
unfinished trials, the studies, the indexes) and the list of its segments, each with its size and SHA-256.
A snapshot therefore costs the controller the trials that finished since the last one, not the whole study;
beyond :data:`MAX_SEGMENTS` segments the next snapshot merges them into one.

The journal stays the record; the snapshot is a cache of it:

- every file is written to a temporary file, fsynced, then renamed (and the folder fsynced), segments before
  the snapshot file that lists them: a kill at any moment leaves the old snapshot or the new one, whole, with
  its segments, and never touches the journal (a segment no snapshot lists is removed when the controller
  opens the journal again);
- it covers only lines already durable in the journal (the writer takes it right after a flush);
- a snapshot that does not match the journal (another Optuna version, a journal cut back or replaced, a
  torn or foreign file, a segment missing or not as listed) is ignored: the journal is replayed in full, as
  without one.

The writer takes a snapshot when the lines since the last one reach a tenth of the journal (at least
:data:`MIN_LINES`), so that a reader replays at most about a tenth of the journal; and once more when the
campaign ends.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import pickle
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import optuna

__all__ = [
    "SNAPSHOT_SUFFIX",
    "MIN_LINES",
    "MIN_SECONDS",
    "MAX_SEGMENTS",
    "Segment",
    "Found",
    "snapshot_path",
    "write_segment",
    "write_snapshot",
    "read_snapshot",
    "read_segments",
    "remove_stale",
    "due",
    "spaced",
]

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
MIN_LINES = 20_000  # below this a replay takes about a second: no snapshot
MAX_SEGMENTS = 32  # more segments than this: the next snapshot merges them into one
_FRACTION = 10  # a new snapshot once the lines since the last one reach 1/_FRACTION of the journal
MIN_SECONDS = 30.0  # and at least this long after the last (each pickles every unfinished trial: see journal.py)
_TAIL = 65_536  # bytes of the journal before the snapshot's end that its header hashes
_FORMAT = 2
_SEGMENT = ".seg-"


@dataclasses.dataclass(frozen=True)
class Segment:
    """One segment file: finished trials by trial id, pickled; listed in the snapshot with its size and hash."""

    name: str
    size: int
    sha256: str
    trials: int


@dataclasses.dataclass(frozen=True)
class Found:
    """A snapshot that matches the journal: the pickled state without its segments' trials, the lines and bytes
    of the journal it covers, and its segments."""

    head: bytes
    lines: int
    size: int
    segments: tuple[Segment, ...]


def snapshot_path(journal: str | Path) -> Path:
    return Path(f"{journal}{SNAPSHOT_SUFFIX}")


def spaced(last_at: float, now: float) -> bool:
    """Whether ``MIN_SECONDS`` have passed since the last snapshot (``time.monotonic`` readings)."""
    return now - last_at >= MIN_SECONDS


def due(lines: int, last_snapshot_lines: int) -> bool:
    """Whether a journal of ``lines`` whole lines, last snapshotted at ``last_snapshot_lines``, needs a new one."""
    new = lines - last_snapshot_lines
    return lines >= MIN_LINES and new > 0 and new * _FRACTION >= lines


def _tail_hash(journal: Path, size: int) -> str:
    start = max(0, size - _TAIL)
    with open(journal, "rb") as fh:
        fh.seek(start)
        data = fh.read(size - start)
    if len(data) != size - start:
        return ""
    return hashlib.sha256(data).hexdigest()


def _write_atomic(target: Path, *chunks: bytes) -> None:
    """``chunks`` as ``target``: a temporary file, fsynced, renamed over it (the folder is fsynced by the caller)."""
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            for chunk in chunks:
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_segment(journal: Path, trials: Mapping[int, Any], lines: int) -> Segment:
    """Write finished ``trials`` (by trial id) as a new segment of the journal's snapshot at ``lines`` lines."""
    body = pickle.dumps(dict(trials), protocol=pickle.HIGHEST_PROTOCOL)
    target = Path(f"{snapshot_path(journal)}{_SEGMENT}{lines:012d}")
    _write_atomic(target, body)
    return Segment(target.name, len(body), hashlib.sha256(body).hexdigest(), len(trials))


def write_snapshot(journal: Path, state: Any, lines: int, size: int, segments: Iterable[Segment] = ()) -> None:
    """Write ``state`` (Optuna's replay result after ``lines`` lines, ``size`` bytes, without the trials of
    ``segments``, written before) as the journal's snapshot, atomically."""
    header = {
        "format": _FORMAT,
        "optuna": optuna.__version__,
        "lines": lines,
        "bytes": size,
        "tail_sha256": _tail_hash(journal, size),
        "segments": [dataclasses.asdict(seg) for seg in segments],
    }
    target = snapshot_path(journal)
    _write_atomic(target, json.dumps(header).encode() + b"\n", pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
    _fsync_dir(target.parent)


def remove_stale(journal: Path, keep: Iterable[Segment] = ()) -> None:
    """Remove what a killed writer left: temporary files, and segments the snapshot does not list (``keep``).
    The single writer calls this as it opens the journal."""
    target = snapshot_path(journal)
    kept = {seg.name for seg in keep}
    for stale in target.parent.glob(f"{target.name}.tmp-*"):
        stale.unlink(missing_ok=True)
    for segment in target.parent.glob(f"{target.name}{_SEGMENT}*"):
        if segment.name not in kept:  # an unlisted segment, or one whose write was cut short
            segment.unlink(missing_ok=True)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_snapshot(journal: Path) -> Found | None:
    """The journal's snapshot when it matches the journal as it is now, else None (no snapshot, or one to
    ignore: see the module's docstring). Its segments are read by :func:`read_segments`."""
    path = snapshot_path(journal)
    try:
        with open(path, "rb") as fh:
            header = json.loads(fh.readline())
            body = fh.read()
        lines, size = int(header["lines"]), int(header["bytes"])
        if header.get("format") != _FORMAT or header.get("optuna") != optuna.__version__:
            return None
        segments = tuple(Segment(**seg) for seg in header["segments"])
        if journal.stat().st_size < size or _tail_hash(journal, size) != header["tail_sha256"]:
            log.warning("%s does not match %s: replaying the whole journal", path, journal)
            return None
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("%s cannot be read (%s): replaying the whole journal", path, exc)
        return None
    return Found(body, lines, size, segments)


def read_segments(journal: Path, segments: Iterable[Segment]) -> dict[int, Any] | None:
    """The trials of ``segments`` by trial id, or None when one is missing or not as the snapshot lists it."""
    trials: dict[int, Any] = {}
    for seg in segments:
        path = journal.parent / seg.name
        try:
            data = path.read_bytes()
            if len(data) != seg.size or hashlib.sha256(data).hexdigest() != seg.sha256:
                log.warning("%s is not the segment its snapshot lists: replaying the whole journal", path)
                return None
            part = pickle.loads(data)
        except (OSError, pickle.UnpicklingError, EOFError, ValueError) as exc:
            log.warning("%s cannot be read (%s): replaying the whole journal", path, exc)
            return None
        if not isinstance(part, dict) or len(part) != seg.trials:
            log.warning("%s does not hold the trials its snapshot lists: replaying the whole journal", path)
            return None
        trials.update(part)
    return trials
