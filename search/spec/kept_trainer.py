"""What a campaign folder recorded about its trainer, read back: the folders it was looked for in and the
by-value copy (``trainer.pkl``), so that a frozen spec finds the trainer its campaign ran.

:mod:`search.store.environment` writes ``environment.json`` and ``trainer.pkl``; the spec's trainer check
(:mod:`search.spec.trainer_check`) reads them through here.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "TRAINER_PICKLE",
    "read_environment",
    "environment_problem",
    "trainer_records",
    "recorded_trainer_paths",
    "stored_trainer",
]

TRAINER_PICKLE = "trainer.pkl"  # a by-value trainer, as its workers got it (next to environment.json)


def read_environment(path: Path) -> dict[str, Any] | None:
    """The recorded environment, or ``None`` when the campaign has none (or it is unreadable:
    :func:`environment_problem` says which)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):  # JSONDecodeError, UnicodeDecodeError
        return None
    return data if isinstance(data, dict) else None


def environment_problem(path: Path) -> str:
    """Why ``path`` gives no environment record, in words (``environment.json is missing``, ``... is corrupt (not
    valid JSON: ...)``); "" when it reads."""
    if not path.exists():
        return f"{path.name} is missing"
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        return f"{path.name} cannot be read ({exc.strerror or exc})"
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        return f"{path.name} is corrupt (not valid JSON: {str(exc).splitlines()[0]})"
    if not isinstance(data, dict):
        return f"{path.name} is corrupt (a JSON {type(data).__name__}, not an object)"
    return ""


def recorded_trainer_paths(folder: Path) -> list[str]:
    """The folders a campaign's trainer was looked for in, as its ``environment.json`` (and resumes) recorded them."""
    return [str(p) for r in trainer_records(folder) for p in r.get("paths") or () if isinstance(p, str)]


def trainer_records(folder: Path) -> list[dict[str, Any]]:
    """The ``trainer`` records of the campaign in ``folder``: its start's, then each resume's."""
    env = read_environment(folder / "environment.json") or {}
    resumes = env.get("resumes")
    records = [env, *(resumes if isinstance(resumes, list) else [])]
    trainers = [r.get("trainer") for r in records if isinstance(r, dict)]
    return [t for t in trainers if isinstance(t, dict)]


def stored_trainer(folder: Path, entry: str | None = None) -> Callable[..., Any] | None:
    """The by-value trainer the campaign in ``folder`` kept (``trainer.pkl``; ``entry``: only if recorded under that
    entry), or None. It is code: load only your own campaigns."""
    path = folder / TRAINER_PICKLE
    if not path.is_file():
        return None
    if entry is not None and not any(r.get("entry") == entry and r.get("pickle") for r in trainer_records(folder)):
        return None
    fn = pickle.loads(path.read_bytes())  # noqa: S301 - the campaign's own trainer, from its owner-only folder
    return fn if callable(fn) else None
