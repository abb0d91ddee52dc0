"""Campaign progress: one live line on a terminal, plain log lines otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from search.campaign import Snapshot

__all__ = ["Progress"]


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}"


def render(s: Snapshot) -> str:
    done = s.complete + s.pruned + s.failed
    width = 24
    filled = int(width * done / s.budget) if s.budget else 0
    bar = "#" * filled + "-" * (width - filled)
    best = "-" if s.best is None else f"{s.best:.4g}"
    extra = "".join(f" {n} {label}" for n, label in ((s.pruned, "pruned"), (s.failed, "failed")) if n)
    return f"[{bar}] {done}/{s.budget} done ({s.complete} ok{extra}), {s.running} running, best {best}, {_clock(s.elapsed)}"


class Progress:
    """Call with each snapshot; redraws on a TTY, logs a line on change (at most every ``interval`` s) otherwise."""

    def __init__(self, stream: TextIO | None = None, interval: float = 10.0, enabled: bool = True) -> None:
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty()
        self._interval = interval
        self._enabled = enabled
        self._last_line = ""
        self._last_time = 0.0
        self._last_done = -1

    def __call__(self, snapshot: Snapshot) -> None:
        if not self._enabled:
            return
        line = render(snapshot)
        if self._tty:
            if line != self._last_line:
                self._stream.write("\r\x1b[2K" + line)
                self._stream.flush()
        else:
            done = snapshot.complete + snapshot.pruned + snapshot.failed
            if done != self._last_done or time.monotonic() - self._last_time >= self._interval:
                self._stream.write(line + "\n")
                self._stream.flush()
                self._last_time = time.monotonic()
        self._last_line = line
        self._last_done = snapshot.complete + snapshot.pruned + snapshot.failed

    def close(self) -> None:
        if self._enabled and self._tty and self._last_line:
            self._stream.write("\n")
            self._stream.flush()
