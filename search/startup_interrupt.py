"""Ctrl-C while the ``hypersweep`` command is still importing: one line and exit 130, not a traceback.

:func:`install` runs first thing in ``search/__init__`` and acts only in the ``hypersweep`` command itself
(``hypersweep ...`` or ``python -m search ...``), never in a program that imports ``search``. The command's
``main`` calls :func:`release` once its imports are done, where its own ``try`` turns ``KeyboardInterrupt`` into
the line that says what was kept. A process that multiprocessing spawned from the command (an embedded worker
importing it as ``__mp_main__``) exits quietly: the controller says what happened.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from types import FrameType

__all__ = ["install", "release"]

EXIT_INTERRUPTED = 130  # spaces.errors.EXIT_INTERRUPTED (not imported: spaces loads optuna)


def _is_command() -> bool:
    first = sys.argv[0] if sys.argv else ""
    return os.path.basename(first) == "hypersweep" or first == "-m"  # "-m": python -m search, while it imports


def _interrupted(_signum: int, _frame: FrameType | None) -> None:
    if "__mp_main__" not in sys.modules:  # the command itself, not a process spawned from it
        os.write(2, b"hypersweep: interrupted\n")
    os._exit(EXIT_INTERRUPTED)


def install() -> None:
    """In the ``hypersweep`` command, with Python's own SIGINT handler in place: Ctrl-C exits 130 in one line."""
    if _is_command() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted)


def release(then: Callable[[int, FrameType | None], object] = signal.default_int_handler) -> None:
    """SIGINT handled by ``then`` (Python's own: ``KeyboardInterrupt``), if :func:`install` replaced Python's."""
    if signal.getsignal(signal.SIGINT) is _interrupted:
        signal.signal(signal.SIGINT, then)
