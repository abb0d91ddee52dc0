"""What the processes the controller spawns (the embedded cluster's workers, the sampler's child) are told to run
of its ``__main__``."""

from __future__ import annotations

import importlib.machinery
import sys
from collections.abc import Callable

__all__ = ["spawn_as_module"]


def spawn_as_module(entry: Callable[..., object]) -> None:
    """Run as the ``hypersweep`` command (pip's script: ``from search.cli import main``, ``entry``), this process's
    spawned children see it as ``python -m search``, whose ``__main__`` they skip, instead of running the script
    again: each imported ``search.cli`` and what it imports for nothing, ~0.07 s of CPU per process (bench/NOTES.md,
    "A small campaign's CPU seconds"). A user's script (a ``__main__`` of its own) is left as it is."""
    script = sys.modules.get("__main__")
    if script is not None and getattr(script, "main", None) is entry and getattr(script, "__spec__", None) is None:
        script.__spec__ = importlib.machinery.ModuleSpec("search.__main__", None)
