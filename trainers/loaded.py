"""A module this process has finished importing: never one another thread is still importing.

A worker runs several trials in threads, and a monitor thread beside them. ``sys.modules`` holds a module from the
moment its import starts, so a thread that looks there while a trial imports torch finds a partial module
("partially initialized module 'torch' has no attribute 'cuda'") and the trial failed outside its trainer.
"""

from __future__ import annotations

import sys
from types import ModuleType

__all__ = ["loaded"]


def loaded(name: str) -> ModuleType | None:
    """``sys.modules[name]`` once its import has ended; None while it is not imported or is still importing."""
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None)
    if module is None or getattr(spec, "_initializing", False):  # importlib's flag while the module body runs
        return None
    return module
