"""The spec's ``[study] storage``: the campaign folder's own file, or an Optuna storage URL that stays with it."""

from __future__ import annotations

from pathlib import Path

from search.spec.table import SpecTable

__all__ = ["storage_of", "FOLDER_STORAGES"]

FOLDER_STORAGES = ("", "journal", "sqlite")  # the campaign folder's own files (search.store.storage)


def storage_of(t: SpecTable) -> str:
    """The campaign folder's ``journal`` (default) or ``sqlite`` file, or an Optuna storage URL of a known scheme
    whose file, if any, has an absolute path: a relative one would land wherever the command runs."""
    url = t.str("storage", "")
    if url in FOLDER_STORAGES:
        return url
    fix = "use 'journal' or 'sqlite' for a file in the campaign folder, or an absolute path"
    if url.startswith("journal:"):
        if not Path(url.removeprefix("journal:")).is_absolute():
            raise t.error(
                "storage", f"{url!r}: a relative journal path would be read from the current directory; {fix}"
            )
        return url
    if url.startswith("sqlite:"):
        path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else ""
        if not path or path.startswith(":memory:") or not Path(path).is_absolute():
            raise t.error(
                "storage",
                f"{url!r}: an in-memory or relative SQLite path would not stay with the "
                f"campaign; {fix} (sqlite:////abs/path/study.db)",
            )
        return url
    if not _known_scheme(url):
        raise t.error(
            "storage",
            f"{url!r} is not a storage Optuna can open: {fix}, or an SQLAlchemy database URL "
            "(postgresql://, mysql://, ...)",
        )
    return url


def _known_scheme(url: str) -> bool:
    """Whether ``url`` is a database URL of a dialect SQLAlchemy knows (its driver need not be installed)."""
    from sqlalchemy.engine import make_url

    try:
        make_url(url).get_dialect()
    except Exception:  # noqa: BLE001 - whatever SQLAlchemy raises for a URL it cannot use
        return False
    return True
