"""The errors the cluster package raises for its users; every other cluster module may import this one."""

from __future__ import annotations

__all__ = ["ClusterError", "InvalidSetting", "MissingExtraError", "one_line"]


class ClusterError(RuntimeError):
    """A cluster that cannot be started or reached; the message is one line for the user."""


class MissingExtraError(ImportError):
    """A backend's optional dependency is not installed; the message names the pip extra."""


class InvalidSetting(ValueError):
    """A backend setting out of range; ``field`` names the setting, so callers need not parse the message."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message``, for a one-line user message (never to decide anything)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
