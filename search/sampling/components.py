"""Samplers and pruners a user brings: a class named ``"pkg.mod:Class"`` in the spec, or an Optuna object from Python.

A spec may name any importable class instead of a built-in name::

    [study]
    sampler = "optuna.samplers:TPESampler"   # or "mypkg.samplers:MySampler"
    pruner = "optuna.pruners:ThresholdPruner"

    [sampler]                                 # the class's keyword arguments
    n_startup_trials = 5

    [pruner]
    upper = 1.0                               # a named pruner class takes [pruner]'s keys (but resource)

A sampler class whose constructor takes ``seed`` gets one derived from the study seed
(unless ``[sampler]`` gives it). From Python, ``search.run(spec, sampler=obj, pruner=obj)``
takes any ``BaseSampler`` / ``BasePruner``: it is registered under its class's
``module:qualname`` (:func:`register`), which the frozen spec names, and pickled into the
campaign folder (``sampler.pkl``, ``pruner.pkl``) when it pickles, so ``resume`` rebuilds it
(:func:`restore_kept`). Each campaign sampler built from an object is a deep copy of it; copies
after the first (``resume``, a replaced sampler child) are reseeded with ``reseed_rng()``.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import logging
import pickle
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spaces.errors import InputError

__all__ = ["ENTRY_RE", "is_entry", "entry_of", "register", "registered", "build", "keep", "restore_kept", "KINDS"]

log = logging.getLogger(__name__)

ENTRY_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
KINDS = ("sampler", "pruner")
_OBJECTS: dict[tuple[str, str], list[Any]] = {}  # (kind, entry) -> [the object, copies handed out]


def is_entry(name: str) -> bool:
    """Whether ``name`` is a ``module:Class`` entry rather than a built-in name."""
    return ":" in name


def entry_of(obj: Any) -> str:
    """``module:qualname`` of ``obj``'s class."""
    cls = type(obj)
    return f"{cls.__module__}:{cls.__qualname__}"


def register(kind: str, obj: Any) -> str:
    """Keep ``obj`` (an Optuna sampler or pruner) for this process under its class's entry; the entry."""
    base = _base_class(kind)
    if not isinstance(obj, base):
        raise TypeError(f"{kind}={obj!r}: must be an optuna {base.__module__}.{base.__name__} instance")
    entry = entry_of(obj)
    _OBJECTS[(kind, entry)] = [obj, 0]
    return entry


def registered(kind: str, entry: str) -> Any | None:
    """The object registered under ``entry``, or None."""
    held = _OBJECTS.get((kind, entry))
    return None if held is None else held[0]


def build(kind: str, entry: str, options: Mapping[str, Any], seed: int | None = None) -> Any:
    """A new ``kind`` for ``entry``: a copy of the registered object, else ``Class(**options)`` (+ ``seed``).

    ``InputError`` (a ``ValueError``, one line) when the class cannot be imported or built with these arguments.
    """
    held = _OBJECTS.get((kind, entry))
    if held is not None:
        return _copy(held)
    cls = import_entry(kind, entry)
    kwargs = dict(options)
    if seed is not None and "seed" not in kwargs and _accepts(cls, "seed"):
        kwargs["seed"] = int(seed)
    try:
        obj = cls(**kwargs)
    except Exception as exc:  # noqa: BLE001 - a user class: its error, as one line
        again = (
            "" if options else f"; an object passed to search.run is passed again: search.resume(folder, {kind}=...)"
        )
        raise InputError(f"{kind} {entry}({_args(kwargs)}) failed: {type(exc).__name__}: {exc}{again}") from None
    base = _base_class(kind)
    if not isinstance(obj, base):
        raise InputError(f"{kind} {entry} built a {type(obj).__name__}, not an optuna {base.__name__}")
    return obj


def import_entry(kind: str, entry: str) -> Any:
    """The class an entry names; ``InputError`` naming the entry otherwise."""
    if not ENTRY_RE.match(entry):
        raise InputError(f"{kind} {entry!r} must be a built-in name or 'package.module:Class'")
    module_name, _, attr = entry.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(f"{kind} {entry!r}: cannot import {module_name!r} ({exc})") from None
    for part in attr.split("."):
        if not hasattr(target, part):
            raise InputError(f"{kind} {entry!r}: module {module_name!r} has no {attr!r}")
        target = getattr(target, part)
    return target


def keep(root: Path, kind: str, entry: str) -> Path | None:
    """Pickle the object registered under ``entry`` as ``root/<kind>.pkl`` (None: none, or it does not pickle)."""
    obj = registered(kind, entry)
    if obj is None:
        return None
    try:
        data = pickle.dumps(obj)
    except Exception as exc:  # noqa: BLE001 - then resume needs it passed again
        log.warning(
            "the %s %s does not pickle (%s); pass it again to search.resume(..., %s=...)", kind, entry, exc, kind
        )
        return None
    path = root / f"{kind}.pkl"
    path.write_bytes(data)
    return path


def restore_kept(root: Path) -> list[str]:
    """Register the objects a campaign kept (``root/sampler.pkl``, ``root/pruner.pkl``) under their entries,
    unless the caller registered one there already (``search.resume(folder, sampler=...)``); their entries."""
    restored = []
    for kind in KINDS:
        path = root / f"{kind}.pkl"
        if not path.is_file():
            continue
        obj = pickle.loads(path.read_bytes())
        if registered(kind, entry_of(obj)) is None:
            restored.append(register(kind, obj))
    return restored


def _copy(held: list[Any]) -> Any:
    obj = held[0]
    try:
        fresh = copy.deepcopy(obj)
    except Exception:  # noqa: BLE001 - e.g. it holds a lock: the object itself
        fresh = obj
    if held[1] > 0 and hasattr(fresh, "reseed_rng"):
        fresh.reseed_rng()  # a later sampler never continues the first one's random stream
    held[1] += 1
    return fresh


def _base_class(kind: str) -> type:
    import optuna

    if kind == "sampler":
        return optuna.samplers.BaseSampler
    if kind == "pruner":
        return optuna.pruners.BasePruner
    raise ValueError(f"kind {kind!r} is not one of {', '.join(KINDS)}")


def _accepts(cls: Any, name: str) -> bool:
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _args(kwargs: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
