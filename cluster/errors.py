"""The errors the cluster package raises for its users; every other cluster module may import this one."""

from __future__ import annotations

__all__ = [
    "ClusterError",
    "SubmissionRefused",
    "SettingError",
    "InvalidSetting",
    "MissingExtraError",
    "USER_ERRORS",
    "one_line",
]


class ClusterError(RuntimeError):
    """A cluster that cannot be started or reached; the message is one line for the user (exit status 3)."""

    exit_code = 3


class SubmissionRefused(ClusterError):
    """The batch system refused a job at submission (a partition that does not exist, more memory than any node
    has): its own message, in one line (exit status 2, as for any setting the user can fix)."""

    exit_code = 2


class MissingExtraError(ImportError):
    """A backend's optional dependency is not installed; the message names the pip extra (exit status 2)."""

    exit_code = 2


class SettingError(ValueError):
    """A cluster setting or worker flag the user gave breaks a rule; the message is one line (exit status 2).

    A plain ``ValueError`` from this package is a bug, and the command line shows its traceback."""

    exit_code = 2


class InvalidSetting(SettingError):
    """A backend setting out of range; ``field`` names the setting, so callers need not parse the message."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


#: The errors of this package meant for the user as one line, each with its ``exit_code``: ``cluster`` must not
#: import ``spaces`` (it would load optuna), so they are not ``HypersweepError``s; the command line maps them too.
USER_ERRORS: tuple[type[Exception], ...] = (ClusterError, MissingExtraError, SettingError)


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message``, for a one-line user message (never to decide anything)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
