"""Ctrl-C and SIGTERM in the ``hypersweep`` command: one line and exit 130, never a traceback.

While the command is still importing, Ctrl-C prints ``hypersweep: interrupted`` and exits 130 at once.

:func:`install` runs first thing in ``search/__init__`` and acts only in the ``hypersweep`` command itself
(``hypersweep ...`` or ``python -m search ...``), never in a program that imports ``search``. The command's
``main`` calls :func:`release` once its imports are done: from there Ctrl-C and SIGTERM are :func:`interrupt`, a
``KeyboardInterrupt`` that its own ``try`` turns into the line that says what was kept. A process that multiprocessing spawned from the command (an embedded worker
importing it as ``__mp_main__``) exits quietly: the controller says what happened.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType

__all__ = ["forget_unhandled", "install", "interrupt", "release"]

EXIT_INTERRUPTED = 130  # spaces.errors.EXIT_INTERRUPTED (not imported: spaces loads optuna)


def _is_command() -> bool:
    first = sys.argv[0] if sys.argv else ""
    return os.path.basename(first) == "hypersweep" or first == "-m"  # "-m": python -m search, while it imports


def _spawned_child() -> bool:
    """A process multiprocessing spawned from the command, importing it as ``__mp_main__``. The name alone does not
    tell: ``import multiprocessing`` makes ``__mp_main__`` an alias of ``__main__`` in every process, the command's
    too; a spawned child runs its copy of the command under a module of its own."""
    mp_main = sys.modules.get("__mp_main__")
    return mp_main is not None and mp_main is not sys.modules.get("__main__")


def _interrupted(_signum: int, _frame: FrameType | None) -> None:
    if not _spawned_child():  # the command itself, not a process spawned from it
        os.write(2, b"hypersweep: interrupted\n")
    os._exit(EXIT_INTERRUPTED)


def install() -> None:
    """In the ``hypersweep`` command, with Python's own SIGINT handler in place: Ctrl-C exits 130 in one line."""
    if _is_command() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted)


def interrupt(_signum: int, _frame: FrameType | None) -> None:
    """Ctrl-C or SIGTERM once the command runs: ``KeyboardInterrupt``, and the way out begins: the process exits
    130 within its bound whatever it waits for (:mod:`cluster.way_out`). What asyncio logs of the tasks it leaves
    failed (a worker that was starting) is noise from here on, on the terminal and in campaign.log."""
    from cluster import way_out

    logging.getLogger("asyncio").disabled = True
    way_out.begin(EXIT_INTERRUPTED)
    raise KeyboardInterrupt


def release(then: Callable[[int, FrameType | None], object] = signal.default_int_handler) -> None:
    """SIGINT handled by ``then`` (Python's own: ``KeyboardInterrupt``), if :func:`install` replaced Python's."""
    if signal.getsignal(signal.SIGINT) is _interrupted:
        signal.signal(signal.SIGINT, then)


def forget_unhandled() -> None:
    """Clear CPython's record of a ``KeyboardInterrupt`` that left a string ``exec``/``eval`` (a dataclass or
    namedtuple being built when Ctrl-C came), though the command caught it.

    Under ``python -m`` that record makes the interpreter end itself by SIGINT after ``main`` returned 130 (status -2
    to a parent process, not 130). Every string evaluation resets it as it starts, so one more clears it.
    """
    exec("pass", {})  # noqa: S102 - a fixed string: its only effect is the reset above
