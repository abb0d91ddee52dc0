"""A trial's parameters, kept in its own folder too: ``trials/<n>/params.json``.

The study storage is the record of a trial's parameters, but a journal torn inside its last
commit (a crash mid-write, a power cut) may keep a trial's creation and lose some of its
parameters, while the trial's folder already holds checkpoints and reports made with them.
So that ``resume`` runs such a trial again with exactly those (its checkpoint still fits) instead
of sampling new ones, the controller writes each new trial's folder and parameters before the
journal writes its record: a :class:`ParamsWriter` makes them on a thread of its own, and the
campaign waits for it before each group commit (:meth:`ParamsWriter.wait`). The file system calls
(a ``mkdir`` and a create, which on a busy disk wait behind the journal's fsync, and on a network
file system cost milliseconds each) thus leave the controller's thread.

A trial number asked anew whose folder already holds files (the journal lost the whole earlier
trial with that number) gets a fresh folder: when a campaign starts, every such folder, numbered
from the storage's trial count on, is moved aside (:func:`set_aside_stale_folders`), never reused.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial

from search.store.folder import CampaignFolder
from search.store.records import Files

__all__ = [
    "PARAMS_FILE",
    "ParamsWriter",
    "write_params",
    "read_params",
    "restore_params",
    "set_aside_stale_folder",
    "set_aside_stale_folders",
]

log = logging.getLogger(__name__)

PARAMS_FILE = Files.TRIAL_PARAMS  # in trials/<n>/: {"number": n, "params": {name: value}}
ORPHANS = "orphaned-trials"  # in the campaign folder: folders of trials the storage lost
WAIT_SECONDS = 300.0  # the longest the campaign waits for trial folders to be written (a hung file system)


def write_params(folder: CampaignFolder, number: int, params: Mapping[str, Any]) -> None:
    """Record trial ``number``'s parameters in its folder (made here if it is not there yet), on this thread."""
    _write_file(str(folder.trial(number)), _encode(number, params))


def _encode(number: int, params: Mapping[str, Any]) -> bytes:
    return json.dumps({"number": int(number), "params": dict(params)}, sort_keys=True).encode()


def _write_file(trial: str, data: bytes) -> None:
    """``trial``/params.json holds ``data``: the folder made first (the trial's runner may have made it already).

    Written in place, not through a temporary file and a rename: a write torn by a crash leaves a file that reads
    as nothing recorded, as a crash before it would. Not fsynced: the journal, which they back, is fsynced at
    most every ``SYNC_INTERVAL`` as well, and the fsync was a tenth of the controller's time per trial at 10,000
    workers. A ``mkdir`` and three calls (open, write, close), with no file object.
    """
    try:
        os.mkdir(trial)
    except FileExistsError:
        pass
    except FileNotFoundError:  # no trials/ folder (yet)
        os.makedirs(trial, exist_ok=True)
    fd = os.open(os.path.join(trial, PARAMS_FILE), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


class ParamsWriter:
    """Writes new trials' folders and ``params.json`` in the order given, on a thread of its own.

    :meth:`put` returns at once; :meth:`wait` returns once everything put before it is written (the campaign
    calls it before each group commit of the journal, and so before it handles any event of those trials), and
    raises what a write raised (a full disk). Until the first :meth:`put` there is no thread.
    """

    def __init__(self, folder: CampaignFolder, name: str = "trial-folders") -> None:
        self._trials = str(folder.trials)
        self._name = name
        self._cond = threading.Condition()
        self._queue: deque[tuple[int, Mapping[str, Any]]] = deque()
        self._put = self._written = 0
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def put(self, number: int, params: Mapping[str, Any]) -> None:
        """Write ``params`` (not changed by the caller after) as trial ``number``'s, soon; in order."""
        with self._cond:
            if self._closed:
                raise RuntimeError(f"{self._name}: closed; trial {number}'s parameters were not written")
            self._queue.append((number, params))
            self._put += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def wait(self, timeout: float = WAIT_SECONDS) -> None:
        """Return once every trial put so far has its folder written; raise the first write's error, if any
        (once), or :class:`TimeoutError` after ``timeout`` seconds (a file system that stopped answering)."""
        with self._cond:
            target = self._put
            done = self._cond.wait_for(lambda: self._written >= target or self._error is not None, timeout)
            error, self._error = self._error, None
        if error is not None:
            raise error
        if not done:
            raise TimeoutError(
                f"{self._name}: {target - self._written} trial folders not written in {timeout:.0f} s under "
                f"{self._trials} (is its file system answering?)"
            )

    def close(self, timeout: float = WAIT_SECONDS) -> None:
        """Write what was put, then end the thread; an error or a timeout is logged, not raised (the campaign is
        ending: what it raised already is what matters)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                log.error("%s: still writing after %.0f s; giving up on it", self._name, timeout)
        with self._cond:
            error, self._error = self._error, None
        if error is not None:
            log.error("%s: a trial's parameters could not be written: %s", self._name, error)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._closed)
                if not self._queue:
                    return
                batch = list(self._queue)
                self._queue.clear()
            for number, params in batch:
                try:
                    _write_file(os.path.join(self._trials, str(int(number))), _encode(number, params))
                except Exception as exc:  # noqa: BLE001 - handed to the thread that waits; the others are written
                    with self._cond:
                        self._error = self._error or exc
            with self._cond:
                self._written += len(batch)  # a failed write counts as done: its error is what the waiter gets
                self._cond.notify_all()


def read_params(folder: CampaignFolder, number: int) -> dict[str, Any] | None:
    """The parameters recorded for trial ``number``, or None (none recorded, or unreadable)."""
    return _read(folder.trial(number), number)


def _read(path: Path, number: int | None = None) -> dict[str, Any] | None:
    try:
        data = json.loads((path / PARAMS_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("params"), dict):
        return None
    return dict(data["params"]) if number is None or data.get("number") == number else None


def restore_params(
    study: optuna.Study,
    frozen: FrozenTrial,
    distributions: Mapping[str, BaseDistribution],
    recorded: Mapping[str, Any] | None,
) -> list[str]:
    """Set on ``frozen`` (in the storage) each recorded parameter its record lacks; the names set, in order.

    Only searched parameters whose recorded value fits its distribution; what the trial has keeps its value.
    """
    restored = []
    for name, value in (recorded or {}).items():
        dist = distributions.get(name)
        if name in frozen.params or dist is None:
            continue
        try:
            internal = dist.to_internal_repr(value)
        except (ValueError, TypeError):
            continue
        if not dist._contains(internal):
            continue
        study._storage.set_trial_param(frozen._trial_id, name, internal, dist)
        restored.append(name)
    return restored


def set_aside_stale_folder(folder: CampaignFolder, number: int) -> Path | None:
    """A new trial ``number`` found a folder left by a trial the storage lost: move it to ``orphaned-trials/``.

    Returns where it went (None when there was nothing to move)."""
    path = folder.trial(number)
    if not path.exists() or not any(path.iterdir()):
        return None
    target = folder.root / ORPHANS / f"{number}-{time.time_ns()}"
    target.parent.mkdir(parents=True, exist_ok=True)
    path.rename(target)
    log.warning(
        "trial %d: its folder held a trial the storage lost (%s); moved to %s",
        number,
        _read(target) or "no parameters recorded",
        target,
    )
    return target


def set_aside_stale_folders(folder: CampaignFolder, first_new: int) -> list[Path]:
    """Before a campaign asks its first trial: move aside every folder ``trials/<n>`` with ``n >= first_new`` (the
    storage's trial count: numbers it will hand out anew) that holds files; where they went, in number order."""
    try:
        names = [entry.name for entry in os.scandir(folder.trials) if entry.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []
    numbers = sorted(int(name) for name in names if name.isdigit() and int(name) >= first_new)
    return [moved for number in numbers if (moved := set_aside_stale_folder(folder, number)) is not None]
