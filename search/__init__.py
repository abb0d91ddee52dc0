"""The controller: specs, the ask/tell campaign loop, samplers, pruning, summaries, the CLI and the Python API.

``search.run(spec, trainer=fit)``, ``search.resume(folder)`` and ``search.load(folder)`` (see
:mod:`search.api`) are imported on first use, so ``import search`` stays cheap.
"""

from __future__ import annotations

from typing import Any

__all__ = ["cli", "campaign", "spec", "runner", "api", "run", "resume", "load", "Result"]

_API = frozenset({"run", "resume", "load", "Result"})


def __getattr__(name: str) -> Any:
    if name in _API:
        from search import api

        return getattr(api, name)
    raise AttributeError(f"module 'search' has no attribute {name!r}")
