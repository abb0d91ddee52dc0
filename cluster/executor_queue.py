"""What lands on a :class:`~cluster.executor.DaskExecutor`'s queue: each a frozen dataclass, put there by the Dask
client's threads (a worker's message, a task's end) and taken by the controller's thread
(:mod:`cluster.executor_events` turns them into events)."""

from __future__ import annotations

import dataclasses
import queue
from collections.abc import Mapping
from typing import Any

__all__ = [
    "FromWorker",
    "TaskDone",
    "RunnerDone",
    "RunnerRefused",
    "WorkerGone",
    "PartDone",
    "SpanCancelled",
    "Wake",
    "QueueItem",
    "EventQueue",
]


@dataclasses.dataclass(frozen=True)
class FromWorker:
    """A message on the campaign's topic, as it came (decoded on the controller's thread:
    :func:`cluster.worker_messages.decode`), and the address of the worker that sent it."""

    message: Mapping[str, Any]
    worker: str


@dataclasses.dataclass(frozen=True)
class TaskDone:
    """The Dask task running trials ``numbers`` (one, or a batch) ended."""

    numbers: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class RunnerDone:
    """The slot runner ``key``'s task ended."""

    key: str


@dataclasses.dataclass(frozen=True)
class RunnerRefused:
    """The slot runner ``key`` did not take trials ``numbers`` sent to it."""

    key: str
    numbers: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class WorkerGone:
    """The scheduler removed ``worker`` from the cluster."""

    worker: str


@dataclasses.dataclass(frozen=True)
class PartDone:
    """Part ``index`` of wide trial ``number`` ended (its task's result is the part's outcome)."""

    number: int
    index: int


@dataclasses.dataclass(frozen=True)
class SpanCancelled:
    """Wide trial ``number`` ended before it was placed (a stop, or no set of workers holds it now): ``why``."""

    number: int
    why: str


@dataclasses.dataclass(frozen=True)
class Wake:
    """Make a waiting ``events`` call return now."""


QueueItem = FromWorker | TaskDone | RunnerDone | RunnerRefused | WorkerGone | PartDone | SpanCancelled | Wake
EventQueue = queue.Queue[QueueItem]
