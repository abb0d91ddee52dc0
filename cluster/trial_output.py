"""A trial's output in its folder: what the trainer prints goes to ``<log_dir>/stdout.log``.

Several trials may run at once in one worker process, one per thread, so ``sys.stdout`` and
``sys.stderr`` cannot simply be swapped. While any trial runs they are each a
:class:`ThreadRouter`: a write from a trial's thread goes to that trial's :class:`TrialLog`,
any other write to the stream the router replaced. The routers go in with the first trial
and come out after the last (unless someone replaced them meanwhile), so a process that only
runs trials now and then (an in-process executor, a test) keeps its own streams otherwise.

A process the trainer starts with ``stdout=sys.stdout`` inherits the log file itself
(:meth:`ThreadRouter.fileno` answers with it in a trial's thread); ``trainers.ddp`` copies its
ranks' output into the launching thread's streams. Output written straight to file
descriptors 1 and 2 (C code) and by threads the trainer starts is not routed.

The file is made with the trial's first output (a trial that prints nothing leaves none).
A log keeps at most ``MAX_LOG_BYTES`` (over all runs of the trial: retries and segments
append); what comes after is dropped, and a ``[truncated]`` line says so. A log that cannot be
written (a full disk) stops, and the trial's output goes where it would without a log (the worker's own streams):
a trial never fails, nor waits, for its log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "STDOUT_LOG",
    "MAX_LOG_BYTES",
    "TrialLog",
    "ThreadRouter",
    "TrialOutput",
    "route_output",
    "make_trial_folders",
]

STDOUT_LOG = "stdout.log"
MAX_LOG_BYTES = 100 * 2**20
_log = logging.getLogger(__name__)
TRUNCATED = b"\n[truncated: this log reached its size limit; later output was dropped]\n"


class TrialLog:
    """One trial's log file, appended to unbuffered (nothing is lost when the process dies), capped.

    The file (and its folder) is made with the first write, or when a process the trainer starts asks for its file
    descriptor, starting with ``header``: a trial that prints nothing leaves no file and costs its slot no create
    system call (a create in a folder waits behind the journal's fsync on the same disk; its folder is made before
    the trainer starts, :func:`make_trial_folders`). Where it cannot be made
    (the campaign folder is not reachable from this worker) it takes nothing, says so once, and the router leaves
    the output where it was."""

    def __init__(self, path: Path, limit: int = MAX_LOG_BYTES, header: str = "") -> None:
        self.path = path
        self._file: Any = None  # opened by the first write
        self._header = header.encode("utf-8", errors="replace")
        self._limit = limit
        self._size = 0
        self._truncated = False
        self._closed = False
        self._failed = False  # its file cannot be made or written: what comes goes where it would without a log
        # re-entrant: a warning logged while the lock is held (a full disk) may come back to this very log, through
        # logging's last-resort handler and the router on sys.stderr; it finds the log truncated and returns
        self._lock = threading.RLock()

    def _open(self) -> bool:
        """Whether the file is open (opened now, with its header, when it was not yet); call with the lock held."""
        if self._file is not None:
            return not self._file.closed
        if self._closed or self._failed:
            return False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115 - closed by close()
        except OSError as exc:  # the campaign folder is not reachable from this worker
            self._failed = True
            _log.warning("%s: cannot open (%s); this trial's output stays where it was", self.path, exc)
            return False
        self._size = os.fstat(self._file.fileno()).st_size
        self._truncated = self._size >= self._limit
        if self._header:
            self._write(self._header)
        return True

    def write(self, text: str) -> int:
        self.write_bytes(text.encode("utf-8", errors="replace"))
        return len(text)

    def write_bytes(self, data: bytes) -> bool:
        """Append ``data`` (up to the limit); False when the log cannot take it (its file cannot be made or written,
        or the log is closed): the caller keeps it where it would have gone without a log."""
        with self._lock:
            if not data:
                return not (self._closed or self._failed)
            if not self._open() or self._failed:
                return False
            self._write(data)
            return not self._failed

    def _write(self, data: bytes) -> None:
        if self._truncated:
            return
        room = self._limit - self._size
        if len(data) > room:
            data, self._truncated = data[: max(room, 0)] + TRUNCATED, True
        try:
            self._file.write(data)
        except OSError as exc:  # a full disk: the log stops, the trial does not fail for it
            self._truncated = self._failed = True
            _log.warning("%s: cannot write (%s); the trial's output goes where it would without a log", self.path, exc)
            return
        self._size += len(data)

    def fileno(self) -> int:
        """The log file's descriptor (made now if need be); ``OSError`` when it cannot be made."""
        with self._lock:
            if not self._open():
                raise OSError(f"{self.path}: no log file to hand out")
            return int(self._file.fileno())

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._file is not None:
                self._file.close()


class ThreadRouter:
    """Stands in for ``sys.stdout`` or ``sys.stderr``: writes from a routed thread go to its log."""

    def __init__(self, original: TextIO | None, routes: dict[int, TrialLog]) -> None:
        self.original = original
        self._routes = routes

    def _log(self) -> TrialLog | None:
        return self._routes.get(threading.get_ident())

    def write(self, text: str) -> int:
        log = self._log()
        if log is not None and log.write_bytes(text.encode("utf-8", errors="replace")):
            return len(text)
        return self.original.write(text) if self.original is not None else len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self._log() is None and self.original is not None:
            self.original.flush()

    def isatty(self) -> bool:
        return self._log() is None and self.original is not None and self.original.isatty()

    def fileno(self) -> int:
        log = self._log()
        if log is not None:
            with contextlib.suppress(OSError):  # no log file to be had: the stream it replaced
                return log.fileno()
        if self.original is None:
            raise OSError("no stream behind this router")
        return self.original.fileno()

    def __getattr__(self, name: str) -> Any:  # encoding, errors, buffer...: the original stream's
        return getattr(self.original, name)


_HOST = socket.gethostname()
_ROUTES: dict[int, TrialLog] = {}  # thread id -> the log of the trial it runs
_ROUTERS: dict[str, ThreadRouter] = {}  # "stdout"/"stderr" -> the router installed on it
_LOCK = threading.Lock()


class TrialOutput:
    """The output of the trial running in this thread, routed to its log until :meth:`close`."""

    def __init__(self, log: TrialLog | None) -> None:
        self.log = log

    def write(self, text: str) -> None:
        if self.log is not None:
            self.log.write(text)

    def close(self) -> None:
        if self.log is None:
            return
        with _LOCK:
            _ROUTES.pop(threading.get_ident(), None)
            if not _ROUTES:
                _uninstall()
        self.log.close()


def route_output(log_dir: str | None, number: int) -> TrialOutput:
    """Route this thread's ``sys.stdout``/``sys.stderr`` to ``<log_dir>/stdout.log`` (``None``: leave them)."""
    if not log_dir:
        return TrialOutput(None)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    header = f"=== trial {number}: started {stamp} on {_HOST} (pid {os.getpid()}) ===\n"
    log = TrialLog(Path(log_dir) / STDOUT_LOG, header=header)  # the file comes with the trial's first output
    with _LOCK:
        _ROUTES[threading.get_ident()] = log
        _install()
    return TrialOutput(log)


def _install() -> None:
    for name in ("stdout", "stderr"):
        current = getattr(sys, name)
        if not isinstance(current, ThreadRouter):
            _ROUTERS[name] = ThreadRouter(current, _ROUTES)
            setattr(sys, name, _ROUTERS[name])


def _uninstall() -> None:
    for name, router in list(_ROUTERS.items()):
        if getattr(sys, name) is router:  # nobody replaced it since
            setattr(sys, name, router.original)
        del _ROUTERS[name]


def make_trial_folders(config: Mapping[str, Any]) -> None:
    """The trial's ``checkpoint_dir`` and ``log_dir``, made before its trainer starts: a trainer may write there
    without making them, and the controller leaves that to where the trial runs (a ``mkdir`` per trial on its own
    thread cost it more than the call). One ``mkdir`` each, usually one folder; one that cannot be made (the
    campaign folder is not reachable from this worker) is logged, and the trial runs all the same."""
    for folder in dict.fromkeys(config.get(key) for key in ("checkpoint_dir", "log_dir")):
        if not folder:
            continue
        try:
            try:
                os.mkdir(folder)
            except FileNotFoundError:  # the campaign's trials/ folder is not there (yet): make the path
                os.makedirs(folder, exist_ok=True)
        except FileExistsError:
            continue
        except OSError as exc:
            _log.warning("%s: cannot make this trial's folder here (%s)", folder, exc)
