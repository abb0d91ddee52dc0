"""A compact snapshot of a journal's replayed state, so that opening a 100,000-trial journal does not replay it.

Optuna's ``JournalStorage`` rebuilds the study by replaying every log line (about 23 per trial with 10
reports): at 100,000 trials that is minutes. The snapshot (``study.journal.snapshot`` beside the journal) is
the pickled replay result after the first ``lines`` lines, with a header that names those lines by their byte
length and a SHA-256 of the bytes just before that length. Opening the journal restores the snapshot and
replays only the lines after it.

The journal stays the record; the snapshot is a cache of it:

- it is written to a temporary file, fsynced, then renamed over the old one (and the folder fsynced): a kill
  at any moment leaves the old snapshot or the new one, whole, and never touches the journal;
- it covers only lines already durable in the journal (the writer takes it right after a flush);
- a snapshot that does not match the journal (another Optuna version, a journal cut back or replaced, a
  torn or foreign file) is ignored: the journal is replayed in full, as without one.

The writer takes a snapshot when the lines since the last one reach a tenth of the journal (at least
:data:`MIN_LINES`), so that the snapshots of a whole campaign cost about ten times one snapshot, and a reader
replays at most about a tenth of the journal; and once more when the campaign ends.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
from pathlib import Path
from typing import Any

import optuna

__all__ = ["SNAPSHOT_SUFFIX", "MIN_LINES", "snapshot_path", "write_snapshot", "read_snapshot", "remove_stale", "due"]

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
MIN_LINES = 20_000  # below this a replay takes about a second: no snapshot
_FRACTION = 10  # a new snapshot once the lines since the last one reach 1/_FRACTION of the journal
_TAIL = 65_536  # bytes of the journal before the snapshot's end that its header hashes
_FORMAT = 1


def snapshot_path(journal: str | Path) -> Path:
    return Path(f"{journal}{SNAPSHOT_SUFFIX}")


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


def write_snapshot(journal: Path, state: Any, lines: int, size: int) -> None:
    """Write ``state`` (Optuna's replay result after ``lines`` lines, ``size`` bytes) as the journal's snapshot,
    atomically (temporary file, fsync, rename, fsync of the folder)."""
    header = {
        "format": _FORMAT,
        "optuna": optuna.__version__,
        "lines": lines,
        "bytes": size,
        "tail_sha256": _tail_hash(journal, size),
    }
    body = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
    target = snapshot_path(journal)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(json.dumps(header).encode() + b"\n")
            fh.write(body)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)


def remove_stale(journal: Path) -> None:
    """Remove the temporary files of snapshots whose writer was killed (the single writer calls this)."""
    target = snapshot_path(journal)
    for stale in target.parent.glob(f"{target.name}.tmp-*"):
        stale.unlink(missing_ok=True)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_snapshot(journal: Path) -> tuple[bytes, int, int] | None:
    """The journal's snapshot as (pickled state, lines, bytes) when it matches the journal as it is now, else
    None (no snapshot, or one to ignore: see the module's docstring)."""
    path = snapshot_path(journal)
    try:
        with open(path, "rb") as fh:
            header = json.loads(fh.readline())
            body = fh.read()
        lines, size = int(header["lines"]), int(header["bytes"])
        if header.get("format") != _FORMAT or header.get("optuna") != optuna.__version__:
            return None
        if journal.stat().st_size < size or _tail_hash(journal, size) != header["tail_sha256"]:
            log.warning("%s does not match %s: replaying the whole journal", path, journal)
            return None
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("%s cannot be read (%s): replaying the whole journal", path, exc)
        return None
    return body, lines, size
