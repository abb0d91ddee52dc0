"""The error base of the whole project, the one error type of ``spaces``, and the small checks that raise it.

:class:`HypersweepError` sits here, at the bottom of the dependency graph, so every
package can subclass it; the ``hypersweep`` command line turns any of them into its
one-line message on stderr and its ``exit_code``.
"""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Iterable
from typing import ClassVar

__all__ = [
    "EXIT_ERROR",
    "EXIT_INPUT",
    "EXIT_CLUSTER",
    "EXIT_ALL_FAILED",
    "EXIT_INTERRUPTED",
    "HypersweepError",
    "InputError",
    "SpaceError",
    "shown",
    "did_you_mean",
    "check_number",
    "check_positive",
    "check_int",
    "check_name",
    "check_choice",
]

# The exit statuses of ``hypersweep`` (README, "Commands"); 0 is success.
EXIT_ERROR = 1  # an unexpected error, or a failure that is not the user's input
EXIT_INPUT = 2  # bad input: a spec mistake, a bad argument, a folder that is missing or in use
EXIT_CLUSTER = 3  # the cluster could not be started or reached
EXIT_ALL_FAILED = 4  # the campaign ran, and every one of its trials failed (or its first ones, one way: fail_fast)
EXIT_INTERRUPTED = 130  # Ctrl-C or SIGTERM


class HypersweepError(Exception):
    """Any error meant for the user as one line; ``exit_code`` is the command line's exit status."""

    exit_code: ClassVar[int] = EXIT_ERROR


class InputError(HypersweepError, ValueError):
    """Bad input from the user (a value, an argument, a file): exit status 2."""

    exit_code: ClassVar[int] = EXIT_INPUT


class SpaceError(InputError):
    """A search-space or schedule value broke a rule.

    ``key`` is the dotted path of the offending value inside the spec
    (``"lr.low"``); ``problem`` says what was wrong and what would be right.
    """

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem

    def __reduce__(self) -> tuple[type[SpaceError], tuple[str, str]]:
        return (type(self), (self.key, self.problem))


def shown(value: object) -> str:
    """``value`` as it appears in an error message: repr and type."""
    return f"{value!r} ({type(value).__name__})"


def did_you_mean(word: str, options: Iterable[str]) -> str:
    """A message tail naming the valid options and the closest one, if any."""
    options = sorted(options)
    close = difflib.get_close_matches(word, options, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"{hint}valid: {', '.join(options)}"


def check_number(key: str, value: object) -> float:
    """Return ``value`` as a finite float; bools and non-numbers are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise SpaceError(key, f"must be a number, got {shown(value)}")
    number = float(value)
    if not math.isfinite(number):
        raise SpaceError(key, f"must be finite, got {value!r}")
    return number


def check_positive(key: str, value: object) -> float:
    """Return ``value`` as a finite float > 0."""
    number = check_number(key, value)
    if number <= 0:
        raise SpaceError(key, f"must be > 0, got {value!r}")
    return number


def check_int(key: str, value: object, minimum: int | None = None) -> int:
    """Return ``value`` as a builtin int, at least ``minimum`` when given."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise SpaceError(key, f"must be an integer, got {shown(value)}")
    number = int(value)
    if minimum is not None and number < minimum:
        raise SpaceError(key, f"must be >= {minimum}, got {number}")
    return number


def check_name(key: str, value: object) -> str:
    """Return ``value`` if it is a non-empty string."""
    if not isinstance(value, str) or not value:
        raise SpaceError(key, f"must be a non-empty string, got {shown(value)}")
    return value


def check_choice(key: str, value: object, options: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``options``, else name the closest."""
    options = tuple(options)
    if not isinstance(value, str):
        raise SpaceError(key, f"must be a string, got {shown(value)}; valid: {', '.join(options)}")
    if value not in options:
        raise SpaceError(key, f"unknown {value!r}; {did_you_mean(value, options)}")
    return value
