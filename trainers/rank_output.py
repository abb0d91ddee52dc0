"""The output of a data-parallel trial's ranks, copied into the launching thread's streams as it comes.

Each rank writes its stdout and stderr to files (``rank<r>.out``, ``rank<r>.err``) in the
launch's private folder. When the trial keeps a log (``TrialConfig.log_dir``), the launcher
calls :meth:`RankOutput.pump` as it waits, and every complete line a rank wrote goes to its own
``sys.stdout`` / ``sys.stderr`` prefixed ``[rank r]``: under a Dask worker those are routed to
the trial's ``stdout.log``, so the ranks' output lands where the single-process trainer's does.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

__all__ = ["RankOutput"]

CHUNK = 1 << 20  # bytes read from one file per pump, at most


class RankOutput:
    """Follows the ranks' output files in ``folder``: ``ranks`` is their number, or the (global) ranks run here."""

    def __init__(self, folder: Path, ranks: int | range) -> None:
        ranks = range(ranks) if isinstance(ranks, int) else ranks
        self._files = [(folder / f"rank{r}.{kind}", r, kind) for r in ranks for kind in ("out", "err")]
        self._offsets = {path: 0 for path, _r, _k in self._files}
        self._partial = {path: b"" for path, _r, _k in self._files}

    def pump(self) -> None:
        """Copy the complete lines written since the last call."""
        for path, rank, kind in self._files:
            data = self._read(path)
            if data:
                *lines, self._partial[path] = (self._partial[path] + data).split(b"\n")
                self._write(lines, rank, kind)

    def drain(self) -> None:
        """Copy everything left, the last unfinished lines too (the ranks have exited)."""
        self.pump()
        for path, rank, kind in self._files:
            if self._partial[path]:
                self._write([self._partial[path]], rank, kind)
                self._partial[path] = b""

    def _read(self, path: Path) -> bytes:
        try:
            with open(path, "rb") as fh:
                fh.seek(self._offsets[path])
                data = fh.read(CHUNK)
        except OSError:
            return b""
        self._offsets[path] += len(data)
        return data

    @staticmethod
    def _write(lines: list[bytes], rank: int, kind: str) -> None:
        stream: TextIO = sys.stdout if kind == "out" else sys.stderr
        if stream is None:
            return
        stream.write("".join(f"[rank {rank}] {line.decode(errors='replace')}\n" for line in lines))
        stream.flush()
