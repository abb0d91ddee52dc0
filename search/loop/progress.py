"""Campaign progress: one live line on a terminal or in a notebook, plain log lines at a bounded rate otherwise."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from search.loop.campaign import Snapshot

__all__ = ["Progress"]


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}"


def render(s: Snapshot, round_label: str = "") -> str:
    """The progress line; ``round_label``: the round of a campaign in rounds (a scaling sweep's) whose end the
    expected end is, said with it (``round 2 ends in ~4m10s``)."""
    done = s.complete + s.pruned + s.failed
    width = 24
    filled = int(width * done / s.budget) if s.budget else 0
    bar = "#" * filled + "-" * (width - filled)
    best = "-" if s.best is None else f"{s.best:.4g}"
    extra = "".join(f" {n} {label}" for n, label in ((s.pruned, "pruned"), (s.failed, "failed")) if n)
    queued = f", {s.queued} queued" if s.queued else ""
    of = f"{round_label} " if round_label else ""
    eta = f", {of}{s.eta.text()}" if s.eta is not None and (s.running or s.queued) else ""
    return (
        f"[{bar}] {done}/{s.budget} done ({s.complete} ok{extra}), {s.running} running{queued}, best {best}, "
        f"{_clock(s.elapsed)}{eta}"
    )


def in_notebook(stream: TextIO) -> bool:
    """Whether ``stream`` is a Jupyter kernel's output (it understands ``\\r``, not a terminal's escapes)."""
    return type(stream).__module__.split(".")[0] == "ipykernel"


class Progress:
    """Call with each snapshot.

    A terminal redraws its line in place; a notebook too (with ``\\r``, at most every
    ``redraw`` s: each write is a message to the browser). Anything else (a log file, CI)
    gets a line when a trial finishes, at most every ``redraw`` s, and one every ``interval``
    s while nothing finishes; :meth:`close` writes the last state.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        interval: float = 10.0,
        enabled: bool = True,
        redraw: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty()
        self._notebook = not self._tty and in_notebook(self._stream)
        self._interval, self._redraw, self._clock = interval, redraw, clock
        self._enabled = enabled
        self._shown = ""  # the line last written
        self._pending = ""  # the latest line, written or not
        self._last_time = -float("inf")
        self._last_done = -1
        self._round = ""

    def in_round(self, label: str) -> None:
        """The campaigns that follow are rounds of one run (a scaling sweep's, each a campaign of its own, whose
        expected end is its own): ``label`` names the one running (``round 2``), on the line with its end; "": none."""
        self._round = label

    def __call__(self, snapshot: Snapshot) -> None:
        if not self._enabled:
            return
        line = render(snapshot, self._round)
        self._pending = line
        done = snapshot.complete + snapshot.pruned + snapshot.failed
        if self._tty:
            if line != self._shown:
                self._draw(line)
        elif self._notebook:
            if line != self._shown and self._clock() - self._last_time >= self._redraw:
                self._draw(line)
        else:
            since = self._clock() - self._last_time
            if (done != self._last_done and since >= self._redraw) or since >= self._interval:
                self._print(line)
                self._last_done = done

    def _draw(self, line: str) -> None:
        """Overwrite the current line: an ANSI erase on a terminal, padding in a notebook."""
        if self._tty:
            self._stream.write("\r\x1b[2K" + line)
        else:
            self._stream.write("\r" + line.ljust(len(self._shown)))
        self._stream.flush()
        self._shown, self._last_time = line, self._clock()

    def _print(self, line: str) -> None:
        self._stream.write(line + "\n")
        self._stream.flush()
        self._shown, self._last_time = line, self._clock()

    def note(self, line: str) -> None:
        """A line that must be seen (a wait for workers), whether or not progress is shown: on a terminal above the
        live line, which is drawn again below it."""
        if self._tty or self._notebook:
            self._stream.write("\r\x1b[2K" if self._tty else "\r" + " " * len(self._shown) + "\r")
        self._stream.write(f"hypersweep: {line}\n")
        if (self._tty or self._notebook) and self._shown:
            self._stream.write(self._shown)
        self._stream.flush()

    def close(self) -> None:
        if not self._enabled or not self._pending:
            return
        if self._tty or self._notebook:
            if self._pending != self._shown:
                self._draw(self._pending)
            self._stream.write("\n")
            self._stream.flush()
        elif self._pending != self._shown:
            self._print(self._pending)
