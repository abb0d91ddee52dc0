"""The controller: specs, the ask/tell campaign loop, samplers, pruning, summaries, the CLI and the Python API.

``search.run(spec, trainer=fit)``, ``search.resume(folder)`` and ``search.load(folder)`` (see
:mod:`search.api`), :class:`StopCampaign` (:mod:`search.loop.hooks`) and :class:`CampaignExistsError` are
imported on first use, so ``import search`` stays cheap.
"""

from __future__ import annotations

from typing import Any

from search.interrupts import install as _quiet_startup_interrupt

_quiet_startup_interrupt()  # the hypersweep command only: Ctrl-C while it imports is one line (exit 130)

__all__ = ["run", "resume", "load", "Result", "StopCampaign", "CampaignExistsError"]

# name -> the module that defines it, imported on first use
_LAZY = {
    "run": "search.api",
    "resume": "search.api",
    "load": "search.api",
    "Result": "search.api",
    "StopCampaign": "search.loop.hooks",
    "CampaignExistsError": "search.session.runner",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'search' has no attribute {name!r}")


def __dir__() -> list[str]:
    """``dir(search)`` and tab completion show the Python API, before first use too."""
    return sorted({*globals(), *__all__})
