"""One registry per extension point: every name a spec (or the report) may use, written once, with a line on it.

A :class:`Registry` maps a name to what implements it (a builder, a class, a section function) and a one-line
description. Spec validation, the error listing the choices, and the docs all read it::

    from search.sampling.samplers import SAMPLER_REGISTRY
    SAMPLER_REGISTRY.names()            # ("tpe", "random", ...), in the order the docs list them
    SAMPLER_REGISTRY.get("tpe")         # the SamplerInfo; an unknown name: InputError listing the names
    SAMPLER_REGISTRY.description("tpe") # one line, for the docs

The extension points: samplers (:mod:`search.sampling.samplers`), pruners (:mod:`search.sampling.pruning`),
policies (:mod:`search.loop.policies`), report sections (:mod:`search.reports.report`), cluster backends
(:data:`BACKENDS` here: a view of ``cluster.backends.REGISTRY``, which cannot import search).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

from spaces.errors import InputError

__all__ = ["Entry", "Registry", "UnknownName", "backends"]

T = TypeVar("T")


class UnknownName(InputError):
    """A name no entry of the registry has; the message lists the registered ones (exit status 2)."""


@dataclasses.dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered name: what implements it and one line on what it does."""

    name: str
    value: T
    description: str


class Registry(Generic[T]):
    """Names -> implementations of one extension point, in registration order (the order the docs list them).

    ``unknown(name, names)`` gives the one-line message for a name not registered (each extension point keeps
    its own wording); by default ``"<kind> 'x' is not one of a, b, c"``.
    """

    def __init__(self, kind: str, unknown: Callable[[str, tuple[str, ...]], str] | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}
        self._unknown = unknown or (lambda name, names: f"{kind} {name!r} is not one of {', '.join(names)}")

    def add(self, name: str, value: T, description: str) -> T:
        """Register ``value`` under ``name``; a name registered twice, or a description that is not one line,
        is a bug in the registering module (``ValueError``)."""
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered already")
        if not description.strip() or "\n" in description:
            raise ValueError(f"{self.kind} {name!r}: the description must be one non-empty line")
        self._entries[name] = Entry(name, value, description)
        return value

    def names(self) -> tuple[str, ...]:
        """Every registered name, in registration order."""
        return tuple(self._entries)

    def get(self, name: str) -> T:
        """What ``name`` registers; :class:`UnknownName` (one line, listing the names) otherwise."""
        entry = self._entries.get(name)
        if entry is None:
            raise UnknownName(self.unknown_message(name))
        return entry.value

    def description(self, name: str) -> str:
        """The one line on ``name``."""
        self.get(name)
        return self._entries[name].description

    def entries(self) -> tuple[Entry[T], ...]:
        return tuple(self._entries.values())

    def unknown_message(self, name: str) -> str:
        """The one-line message for a name that is not registered."""
        return self._unknown(name, self.names())

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, name: str) -> T:
        return self._entries[name].value

    def items(self) -> Iterable[tuple[str, T]]:
        return ((name, entry.value) for name, entry in self._entries.items())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self.names())})"


def backends() -> Registry[type]:
    """The cluster backends (``[cluster] backend``), read from ``cluster.backends.REGISTRY`` and each class's
    ``description``; ``cluster`` cannot import ``search``, so the names are written there, once."""
    from cluster.backends import REGISTRY

    registry: Registry[type] = Registry(
        "backend", lambda name, names: f"backend={name!r}: must be one of {', '.join(names)}"
    )
    for name, cls in REGISTRY.items():
        registry.add(name, cls, cls.description_of(name))
    return registry
