"""A trial's parameters, kept in its own folder too: ``trials/<n>/params.json``.

The study storage is the record of a trial's parameters, but a journal torn inside its last
commit (a crash mid-write, a power cut) may keep a trial's creation and lose some of its
parameters, while the trial's folder already holds checkpoints and reports made with them.
The controller writes the parameters here before the trial is sent out, so that ``resume``
runs the trial again with exactly those (its checkpoint still fits) instead of sampling new
ones. A trial number asked anew whose folder already holds files (the journal lost the whole
earlier trial with that number) gets a fresh folder: the old one is moved aside, never reused.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial

from search.store.folder import CampaignFolder
from search.store.records import Files

__all__ = ["PARAMS_FILE", "claim_folder", "write_params", "read_params", "restore_params", "set_aside_stale_folder"]

log = logging.getLogger(__name__)

PARAMS_FILE = Files.TRIAL_PARAMS  # in trials/<n>/: {"number": n, "params": {name: value}}
ORPHANS = "orphaned-trials"  # in the campaign folder: folders of trials the storage lost


def claim_folder(folder: CampaignFolder, number: int) -> Path | None:
    """Make new trial ``number``'s folder; one already there that holds files (a trial the storage lost) is moved
    aside first (:func:`set_aside_stale_folder`), and where it went is returned.

    One ``mkdir`` for a new folder, the usual case: each file system call on the controller's thread hands the
    interpreter to the client's event loop and waits to get it back, which costs more than the call itself."""
    path = folder.trial(number)
    try:
        os.mkdir(path)
        return None
    except FileExistsError:
        pass
    except FileNotFoundError:  # no trials/ folder (yet)
        path.mkdir(parents=True, exist_ok=True)
        return None
    moved = set_aside_stale_folder(folder, number)
    path.mkdir(parents=True, exist_ok=True)
    return moved


def write_params(folder: CampaignFolder, number: int, params: Mapping[str, Any]) -> None:
    """Record trial ``number``'s parameters in its folder (made here if it is not there yet).

    Written in place, not through a temporary file and a rename: the folder is new (a stale one was set aside),
    so a write torn by a crash leaves a file that reads as nothing recorded, as a crash before it would. A
    rename costs the controller a metadata operation that waits behind the journal's fsync (about 0.2 ms a
    trial on ext4). Not fsynced either: the journal, which they back, is fsynced at most every
    ``SYNC_INTERVAL`` as well, and the fsync was a tenth of the controller's time per trial at 10,000 workers.
    Three system calls (open, write, close), with no file object.
    """
    path = folder.trial(number) / PARAMS_FILE
    data = json.dumps({"number": int(number), "params": dict(params)}, sort_keys=True).encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    except FileNotFoundError:  # a trial left running whose folder never got made
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


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
