"""Open a finished campaign's study with plain Optuna, whatever storage file it used."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.storages.journal import JournalFileBackend, JournalStorage


def load(folder: Path, name: str) -> optuna.Study:
    """``runs/<name>``'s study: the journal file by default, the SQLite file where the spec chose it."""
    journal = Path(folder) / "study.journal"
    if journal.exists():
        return optuna.load_study(study_name=name, storage=JournalStorage(JournalFileBackend(str(journal))))
    return optuna.load_study(study_name=name, storage=f"sqlite:///{Path(folder) / 'study.db'}")
