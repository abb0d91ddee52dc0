"""Each trial's parameters, kept beside the study storage too: ``trial-params.jsonl`` in the campaign folder.

The study storage is the record of a trial's parameters, but a journal torn inside its last
commit (a crash mid-write, a power cut) may keep a trial's creation and lose some of its
parameters, while the trial's folder already holds checkpoints and reports made with them.
So that ``resume`` runs such a trial again with exactly those (its checkpoint still fits) instead
of sampling new ones, the controller appends each new trial's parameters to the campaign's
parameters log (:class:`ParamsLog`, a line per trial) before the journal writes its record: the
loop writes the lines of the trials it asked with one append, just before each group commit of
the journal (and so before it handles any event of theirs).

That is one system call per loop iteration. A file per trial (``trials/<n>/params.json``, as
campaigns before this one kept them, which :func:`read_params` still reads) cost the controller a
``mkdir`` and a create per trial, 0.3 ms each here (each hands the interpreter to the client's event
loop, and a create on a busy disk waits behind the journal's fsync), milliseconds on a network file
system; a thread doing them instead waited for the interpreter as long. The trial's folder is made
where the trial runs, before its trainer starts (``cluster.entrypoint``), or by the first record the
controller writes there.

A trial number asked anew whose folder already holds files (the journal lost the whole earlier
trial with that number) gets a fresh folder: when a campaign starts, every such folder, numbered
from the storage's trial count on, is moved aside (:func:`set_aside_stale_folders`), never reused.
A number's last line in the log is its record.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial

from search.compat import optuna_private as op
from search.store.folder import CampaignFolder
from search.store.records import Files, ends_mid_line

__all__ = [
    "PARAMS_FILE",
    "PARAMS_LOG",
    "ParamsLog",
    "recorded_params",
    "read_params",
    "restore_params",
    "set_aside_stale_folder",
    "set_aside_stale_folders",
]

log = logging.getLogger(__name__)

PARAMS_LOG = Files.PARAMS_LOG  # in the campaign folder: {"number": n, "params": {name: value}} per line
PARAMS_FILE = Files.TRIAL_PARAMS  # in trials/<n>/, as campaigns made before the log kept them: read only
ORPHANS = "orphaned-trials"  # in the campaign folder: folders of trials the storage lost


def _line(number: int, params: Mapping[str, Any]) -> bytes:
    return (json.dumps({"number": int(number), "params": dict(params)}, sort_keys=True) + "\n").encode()


class ParamsLog:
    """The campaign's parameters log, appended to: :meth:`put` keeps a trial's line (any thread), :meth:`flush`
    writes every line kept with one ``write``.

    Not fsynced: the journal, which it backs, is fsynced at most every ``SYNC_INTERVAL`` as well. A write that
    fails (a full disk) keeps its lines for the next flush and raises; a line torn by a crash mid-write stays on
    a line of its own, which the reader skips.
    """

    def __init__(self, folder: CampaignFolder) -> None:
        self.path = folder.root / PARAMS_LOG
        self._lines: list[bytes] = []
        self._lock = threading.Lock()
        self._fd: int | None = None

    def put(self, number: int, params: Mapping[str, Any]) -> None:
        """Keep trial ``number``'s line, for the next :meth:`flush`."""
        line = _line(number, params)
        with self._lock:
            self._lines.append(line)

    def flush(self) -> int:
        """Append the lines kept; how many."""
        with self._lock:
            if not self._lines:
                return 0
            data, count = b"".join(self._lines), len(self._lines)
            self._append(data)
            self._lines = []
            return count

    def close(self) -> None:
        """Write what is kept (a failure is logged: the campaign is ending), then close the file."""
        try:
            self.flush()
        except OSError as exc:
            log.error("%s: %d trials' parameters could not be written: %s", self.path, len(self._lines), exc)
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _append(self, data: bytes) -> None:
        if self._fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
            if ends_mid_line(fd):
                os.write(fd, b"\n")  # a line torn by a crash stays on a line of its own
            self._fd = fd
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except BaseException:  # cut short: the next flush opens the file again, after a line of its own
            os.close(self._fd)
            self._fd = None
            raise


def recorded_params(folder: CampaignFolder) -> dict[int, dict[str, Any]]:
    """Every trial's parameters in the campaign's log, by number (a number's last whole line wins)."""
    try:
        text = (folder.root / PARAMS_LOG).read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return {}
    recorded: dict[int, dict[str, Any]] = {}
    for line in text.splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue  # torn by a crash mid-write
        if isinstance(data, dict) and isinstance(data.get("number"), int) and isinstance(data.get("params"), dict):
            recorded[data["number"]] = dict(data["params"])
    return recorded


def read_params(
    folder: CampaignFolder, number: int, recorded: Mapping[int, Mapping[str, Any]] | None = None
) -> dict[str, Any] | None:
    """The parameters recorded for trial ``number`` (``recorded``: the log, read already), or None: none recorded,
    or unreadable. A campaign made before the log has them in ``trials/<n>/params.json``."""
    found = (recorded_params(folder) if recorded is None else recorded).get(number)
    return dict(found) if found is not None else _read(folder.trial(number), number)


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
        if not op.contains(dist, internal):
            continue
        op.storage_of(study).set_trial_param(op.frozen_id(study, frozen), name, internal, dist)
        restored.append(name)
    return restored


def set_aside_stale_folder(
    folder: CampaignFolder, number: int, recorded: Mapping[int, Mapping[str, Any]] | None = None
) -> Path | None:
    """A new trial ``number`` found a folder left by a trial the storage lost: move it to ``orphaned-trials/``.
    ``recorded``: the parameters log, read already (its line for ``number`` is logged with the move).

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
        (recorded_params(folder) if recorded is None else recorded).get(number)
        or _read(target)
        or "no parameters recorded",
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
    if not numbers:
        return []
    recorded = recorded_params(folder)
    return [moved for n in numbers if (moved := set_aside_stale_folder(folder, n, recorded)) is not None]
