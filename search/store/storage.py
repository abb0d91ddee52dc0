"""Open the study storage: the campaign folder's journal file by default, its SQLite (WAL) file, or any Optuna URL.

``storage = "journal"`` (or no ``storage``) is the folder's Optuna journal file, which the
controller writes with group commit; ``storage = "sqlite"`` is an SQLite database in WAL mode
in the same folder; anything else is an Optuna storage URL, used as given.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import optuna
from optuna.storages import BaseStorage
from optuna.storages.journal import JournalFileBackend, JournalStorage

from search.compat import optuna_private as op
from search.store.folder import CampaignFolder
from search.store.journal import (
    ControllerJournalStorage,
    GroupCommitJournal,
    PublicJournalStorage,
    SnapshotJournalStorage,
)
from spaces.errors import InputError

if TYPE_CHECKING:  # sqlalchemy loads for an SQLite or RDB storage only
    from optuna.storages import RDBStorage

__all__ = [
    "storage_url",
    "open_storage",
    "describe_storage",
    "flusher",
    "final_snapshot",
    "missing_storage",
    "MissingStorageError",
]

JOURNAL = "journal"
SQLITE = "sqlite"


def storage_url(spec_storage: str, folder: CampaignFolder) -> str:
    """The storage a campaign uses: the folder's journal file (default), its SQLite file, or any URL."""
    if spec_storage in ("", JOURNAL):
        return f"journal:{folder.journal}"
    if spec_storage == SQLITE:
        return f"sqlite:///{folder.sqlite}"
    return spec_storage


class MissingStorageError(InputError):
    """A reader opened a storage file that is not there (a reader never creates one)."""


def missing_storage(url: str) -> Path | None:
    """The file a ``journal:`` or ``sqlite:///`` storage lives in, when it does not exist (else None)."""
    for prefix in ("journal:", "sqlite:///"):
        if url.startswith(prefix):
            path = Path(url.removeprefix(prefix))
            return None if path.exists() else path
    return None


def _enable_wal(path: Path) -> None:
    # WAL survives a crash mid-write and lets readers (status, dashboard) read while we write.
    con = sqlite3.connect(path, timeout=60)
    try:
        con.execute("PRAGMA journal_mode=WAL")
    finally:
        con.close()


def _sync_normal(storage: RDBStorage) -> None:
    """WAL with ``synchronous=NORMAL``: a commit no longer waits for an fsync (1.5 ms here).

    The database still survives the controller being killed at any point (the WAL is
    written before a commit returns); only an OS crash or power cut may lose the
    last commits, never corrupt the file.
    """

    def on_connect(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        dbapi_connection.execute("PRAGMA synchronous=NORMAL")

    from sqlalchemy import event

    event.listen(storage.engine, "connect", on_connect)
    storage.engine.dispose()  # connections made before the listener reconnect with it


def open_storage(url: str, writer: bool = False, create: bool = False) -> BaseStorage:
    """An Optuna storage for ``url`` (``journal:PATH`` for a journal file).

    The controller opens the journal as its ``writer`` (group commit, repairs a torn
    last line); everyone else (status, report, reproduce) reads it with Optuna's own
    backend and never modifies the file, nor creates a storage file that is missing
    (:class:`MissingStorageError`), unless asked to ``create`` the study.
    """
    missing = None if writer or create else missing_storage(url)
    if missing is not None:
        raise MissingStorageError(f"{missing}: no such storage file (the campaign has no study there)")
    if url.startswith("journal:"):
        path = url.removeprefix("journal:")
        if not op.uses("journal"):  # Optuna's private journal API moved: its public storage, the same file
            return (
                PublicJournalStorage(GroupCommitJournal(path)) if writer else JournalStorage(JournalFileBackend(path))
            )
        if writer:
            return ControllerJournalStorage(GroupCommitJournal(path))
        return SnapshotJournalStorage(JournalFileBackend(path), path)  # from its snapshot when it has one
    if url.startswith("sqlite:///"):
        db = Path(url.removeprefix("sqlite:///"))
        db.parent.mkdir(parents=True, exist_ok=True)
        _enable_wal(db)
        # The busy timeout makes SQLite retry, rather than fail, on 'database is locked'.
        from optuna.storages import RDBStorage

        storage = RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 60}})
        _sync_normal(storage)
        return storage
    return optuna.storages.get_storage(url)


def flusher(storage: BaseStorage, sync: bool = False) -> Callable[[], object]:
    """What the campaign calls once per loop iteration to write its entries out (and, now and then, to write
    the journal's snapshot); ``sync``: the call also fsyncs them (see :mod:`search.store.journal`)."""
    if isinstance(storage, (ControllerJournalStorage, PublicJournalStorage)):
        return functools.partial(storage.flush, sync)
    backend = op.backend_of(storage)
    return functools.partial(backend.flush, sync) if isinstance(backend, GroupCommitJournal) else (lambda: None)


def final_snapshot(storage: BaseStorage) -> None:
    """The campaign's run ended: a last snapshot of a big journal, so that ``status``, ``report`` and ``resume``
    replay nothing (see :mod:`search.store.snapshot`)."""
    if isinstance(storage, ControllerJournalStorage):
        storage.snapshot()


def describe_storage(url: str) -> str:
    """How a user opens this storage with plain Optuna."""
    if url.startswith("journal:"):
        path = url.removeprefix("journal:")
        return f"JournalStorage(JournalFileBackend({path!r}))"
    return repr(url)
