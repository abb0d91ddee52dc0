"""The toy spec, once: the toy trainer (``toy_trainers:fit``, one float parameter ``quality``), random sampler,
one worker. Tests state only what they change: ``toy_spec(**overrides)`` for a dict (the Python API),
``toy_toml(**overrides)`` for the same spec as TOML text (a spec file, the command line).

``digits_toml(...)``: the same for the real trainer (``trainers.classifier:fit`` on the 8x8 digits, CPU, Adam at
batch 32 with a searched learning rate, one worker of 2 slots), with the same overrides: the segment, elastic and
data-parallel tests.

Overrides: ``name``, ``n_trials``, ``epochs``; any other keyword is a ``[study]`` key; ``trainer`` and ``cluster``
are merged into their tables; ``space`` replaces the space; ``top`` adds top-level keys as given (``logging``,
``enqueue``, ...).
A key given as ``None`` is left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from search.spec.toml_text import to_toml


def toy_spec(
    name: str = "toy",
    n_trials: int = 2,
    epochs: int = 2,
    *,
    trainer: Mapping[str, Any] | None = None,
    space: Mapping[str, Any] | None = None,
    cluster: Mapping[str, Any] | None = None,
    top: Mapping[str, Any] | None = None,
    **study: Any,
) -> dict[str, Any]:
    """The toy spec as a dict, with ``overrides`` applied (see the module docstring)."""
    spec = {
        "study": _merged(
            {
                "name": name,
                "direction": "maximize",
                "metric": "score",
                "sampler": "random",
                "seed": 1,
                "n_trials": n_trials,
            },
            study,
        ),
        "trainer": _merged({"entry": "toy_trainers:fit", "epochs": epochs}, trainer or {}),
        "space": dict(space) if space is not None else {"quality": {"type": "float", "low": 0.0, "high": 1.0}},
        "cluster": _merged({"n_workers": 1}, cluster or {}),
    }
    return {**spec, **(top or {})}


def toy_toml(name: str = "toy", n_trials: int = 2, epochs: int = 2, **overrides: Any) -> str:
    """The toy spec as TOML text (a spec file's body), with the same overrides as :func:`toy_spec`."""
    return to_toml(toy_spec(name, n_trials, epochs, **overrides))


DIGITS_SPACE = {"optimizer": "adam", "lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True}, "batch_size": 32}


def digits_toml(
    name: str,
    n_trials: int = 1,
    epochs: int = 3,
    *,
    trainer: Mapping[str, Any] | None = None,
    space: Mapping[str, Any] | None = None,
    cluster: Mapping[str, Any] | None = None,
    top: Mapping[str, Any] | None = None,
    **study: Any,
) -> str:
    """The digits spec as TOML text; ``space`` is added to :data:`DIGITS_SPACE` (a ``None`` value removes a key)."""
    spec = toy_spec(
        name,
        n_trials,
        epochs,
        trainer={"entry": "trainers.classifier:fit", "dataset": "digits", "device": "cpu", **(trainer or {})},
        space=_merged(DIGITS_SPACE, space or {}),
        cluster={"slots_per_worker": 2, **(cluster or {})},
        top=top,
        **{"metric": "val_accuracy", "seed": 3, "max_retries": 0, **study},
    )
    return to_toml(spec)


def _merged(base: dict[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    out = {**base, **changes}
    return {k: v for k, v in out.items() if v is not None}
