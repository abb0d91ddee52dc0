"""Which line of a journal file cannot be read, for readers (``status``, ``report``) that must say so.

Optuna's ``JournalFileBackend`` raises on an unreadable line in the middle of the file (a ``JSONDecodeError`` or
``UnicodeDecodeError`` that names no line) and skips an unreadable last line without a word, so that a reader
would show a campaign with trials missing, or a finished one as interrupted. These functions find the line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["first_unreadable_line", "unreadable_last_line", "UnreadableLine", "line_text"]

_TAIL = 1 << 16  # bytes read from the end of the file to find its last line (a journal entry is far shorter)

UnreadableLine = tuple[int, str]  # (line number from 1, why it cannot be read)


def _why(line: bytes) -> str | None:
    """Why ``line`` is not a journal entry (a JSON object), or None when it is one."""
    try:
        entry = json.loads(line)
    except UnicodeDecodeError:
        return "not text"
    except ValueError as exc:
        return f"not JSON: {exc}"
    return None if isinstance(entry, dict) else f"a JSON {type(entry).__name__}, not an entry"


def first_unreadable_line(path: Path) -> UnreadableLine | None:
    """The first line of the journal at ``path`` that is not a JSON object, and why; None when every line is one."""
    with open(path, "rb") as fh:
        for number, line in enumerate(fh, start=1):
            if line.strip():
                why = _why(line)
                if why is not None:
                    return number, why
    return None


def unreadable_last_line(path: Path) -> UnreadableLine | None:
    """The journal's last line when it is not a JSON object (Optuna skips it, as if a write had been torn), else
    None. Reads only the file's tail, and counts its newlines to number the line."""
    size = path.stat().st_size
    if not size:
        return None
    with open(path, "rb") as fh:
        fh.seek(max(0, size - _TAIL))
        tail = fh.read()
    stripped = tail.rstrip(b"\n")
    last = stripped.rsplit(b"\n", 1)[-1]
    why = _why(last) if last.strip() else None
    if why is None:
        return None
    start = size - len(tail) + len(stripped) - len(last)  # where the last line begins
    return _count_lines(path, start) + 1, why


def _count_lines(path: Path, end: int) -> int:
    """Newlines in the first ``end`` bytes of ``path``."""
    count, done = 0, 0
    with open(path, "rb") as fh:
        while done < end:
            chunk = fh.read(min(1 << 20, end - done))
            if not chunk:
                break
            count += chunk.count(b"\n")
            done += len(chunk)
    return count


def line_text(path: Path, found: UnreadableLine) -> str:
    """``runs/x/study.journal, line 3: not JSON: ...``."""
    number, why = found
    return f"{os.path.relpath(path) if not os.path.relpath(path).startswith('..') else path}, line {number}: {why}"
