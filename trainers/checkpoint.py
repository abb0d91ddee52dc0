"""Atomic checkpoint files: a crash mid-write never leaves a broken checkpoint."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

__all__ = ["save_checkpoint", "load_checkpoint"]


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically.

    The state goes to a temporary file in the same folder, is flushed and fsynced,
    and then replaces ``path`` in one ``os.replace``; readers see the old file or
    the new one, never a partial one. A failed write (a full disk) removes the temporary
    file and raises ``OSError`` naming ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        inner = exc.__context__
        if isinstance(exc, RuntimeError) and isinstance(inner, OSError):  # torch.save wraps a failed write
            raise OSError(inner.errno, inner.strerror, str(path)) from exc
        raise
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable (POSIX; a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def load_checkpoint(path: str | Path) -> dict[str, Any] | None:
    """The state saved at ``path`` (tensors on the CPU), or ``None`` if there is none."""
    path = Path(path)
    if not path.exists():
        return None
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict):
        raise ValueError(f"{path}: not a checkpoint (holds a {type(state).__name__}, not a dict)")
    return state
