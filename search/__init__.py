"""The controller: specs, the ask/tell campaign loop, samplers, pruning, summaries, the CLI and the Python API.

``search.run(spec, trainer=fit)``, ``search.resume(folder)`` and ``search.load(folder)`` (see
:mod:`search.api`), ``search.optimize(objective, n_trials=...)`` (an Optuna objective: :mod:`search.objective_api`),
:class:`StopCampaign` (:mod:`search.loop.hooks`), :class:`CampaignExistsError` and the errors raised where the
command line exits 4 (:class:`TrialsFailedError` and its two kinds, from :mod:`search.store.failures`) are imported on
first use, so ``import search`` stays cheap.
"""

from __future__ import annotations

from typing import Any

from search.interrupts import install as _quiet_startup_interrupt

_quiet_startup_interrupt()  # the hypersweep command only: Ctrl-C while it imports is one line (exit 130)

__all__ = [
    "run",
    "resume",
    "load",
    "optimize",
    "Result",
    "StopCampaign",
    "CampaignExistsError",
    "TrialsFailedError",
    "EarlyFailuresError",
    "AllTrialsFailedError",
]

# name -> the module that defines it, imported on first use
_LAZY = {
    "run": "search.api",
    "resume": "search.api",
    "load": "search.api",
    "optimize": "search.objective_api",
    "Result": "search.api",
    "StopCampaign": "search.loop.hooks",
    "CampaignExistsError": "search.session.runner",
    "TrialsFailedError": "search.store.failures",
    "EarlyFailuresError": "search.store.failures",
    "AllTrialsFailedError": "search.store.failures",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'search' has no attribute {name!r}")


def __dir__() -> list[str]:
    """``dir(search)`` and tab completion show the Python API, before first use too."""
    return sorted({*globals(), *__all__})
