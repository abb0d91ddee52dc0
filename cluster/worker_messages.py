"""What a worker sends up a campaign's event stream (``Worker.log_event`` on its topic), typed on both sides.

Each message is a frozen dataclass; it travels as a dict of msgpack types tagged with its ``kind``
(:meth:`to_message`), and the controller turns that dict back into the dataclass with :func:`decode`, which reads the
tag and nothing else. The scheduler adds the sender's address to each dict as ``worker``: no message has a field of
that name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from .outcome import Outcome

__all__ = [
    "KIND",
    "TrialStarted",
    "TrialReported",
    "MemoryPeak",
    "TrialEnded",
    "TrialAsked",
    "RunnerReady",
    "PartStarted",
    "WorkerMessage",
    "decode",
    "send",
]

KIND = "kind"  # the key of each message's tag


@dataclasses.dataclass(frozen=True)
class TrialStarted:
    """A trial began on this worker (queued trials wait for a slot first); ``started``: the worker's clock."""

    kind: ClassVar[str] = "started"
    number: int
    started: float

    def to_message(self) -> dict[str, Any]:
        return {KIND: self.kind, "number": self.number, "started": self.started}

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> TrialStarted:
        return cls(int(message["number"]), float(message["started"]))


@dataclasses.dataclass(frozen=True)
class TrialReported:
    """An intermediate report; ``memory``: the trial's peak device (or host) memory so far, in bytes, where measured."""

    kind: ClassVar[str] = "report"
    number: int
    step: int
    metrics: Mapping[str, float]
    time: float
    memory: int | None = None

    def to_message(self) -> dict[str, Any]:
        message = {KIND: self.kind, "number": self.number, "step": self.step, "metrics": dict(self.metrics)}
        message.update({"time": self.time, "memory": self.memory})
        return message

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> TrialReported:
        memory = message.get("memory")
        return cls(
            int(message["number"]),
            int(message["step"]),
            dict(message["metrics"]),
            float(message["time"]),
            None if memory is None else int(memory),
        )


@dataclasses.dataclass(frozen=True)
class MemoryPeak:
    """The trial's memory peak grew (bytes): a worker killed for memory leaves its last figure."""

    kind: ClassVar[str] = "memory"
    number: int
    memory: int
    time: float

    def to_message(self) -> dict[str, Any]:
        return {KIND: self.kind, "number": self.number, "memory": self.memory, "time": self.time}

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> MemoryPeak:
        return cls(int(message["number"]), int(message["memory"]), float(message["time"]))


@dataclasses.dataclass(frozen=True)
class TrialEnded:
    """A trial's outcome, sent after its reports (the task's result still carries it where this one is late)."""

    kind: ClassVar[str] = "outcome"
    number: int
    outcome: Outcome

    def to_message(self) -> dict[str, Any]:
        return {KIND: self.kind, "number": self.number, "outcome": self.outcome.to_message()}

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> TrialEnded:
        return cls(int(message["number"]), Outcome.from_message(message["outcome"]))


@dataclasses.dataclass(frozen=True)
class TrialAsked:
    """A running trial's question to the controller (:mod:`cluster.queries`); ``seq`` tells its answer apart."""

    kind: ClassVar[str] = "query"
    number: int
    question: Mapping[str, Any]
    seq: int
    time: float

    def to_message(self) -> dict[str, Any]:
        return {
            KIND: self.kind,
            "number": self.number,
            "question": dict(self.question),
            "seq": self.seq,
            "time": self.time,
        }

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> TrialAsked:
        return cls(int(message["number"]), dict(message["question"]), int(message["seq"]), float(message["time"]))


@dataclasses.dataclass(frozen=True)
class RunnerReady:
    """A slot runner (:mod:`cluster.slot_runner`) started on the worker at ``address`` and takes trials now."""

    kind: ClassVar[str] = "runner-ready"
    runner: str
    address: str
    worker_id: str

    def to_message(self) -> dict[str, Any]:
        return {KIND: self.kind, "runner": self.runner, "address": self.address, "worker_id": self.worker_id}

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> RunnerReady:
        return cls(str(message["runner"]), str(message["address"]), str(message["worker_id"]))


@dataclasses.dataclass(frozen=True)
class PartStarted:
    """Part ``part`` of a trial wider than a worker began (:mod:`cluster.span_part`)."""

    kind: ClassVar[str] = "part-started"
    number: int
    part: int
    started: float

    def to_message(self) -> dict[str, Any]:
        return {KIND: self.kind, "number": self.number, "part": self.part, "started": self.started}

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> PartStarted:
        return cls(int(message["number"]), int(message["part"]), float(message["started"]))


WorkerMessage = TrialStarted | TrialReported | MemoryPeak | TrialEnded | TrialAsked | RunnerReady | PartStarted

_BY_KIND: dict[str, Any] = {
    cls.kind: cls for cls in (TrialStarted, TrialReported, MemoryPeak, TrialEnded, TrialAsked, RunnerReady, PartStarted)
}


def decode(message: Mapping[str, Any]) -> WorkerMessage | None:
    """The message ``to_message`` wrote, by its ``kind``; None for a kind this version does not know (dropped)."""
    cls = _BY_KIND.get(str(message.get(KIND, "")))
    return None if cls is None else cls.from_message(message)


def send(worker: Any, topic: str, message: WorkerMessage) -> None:
    """Send ``message`` up ``topic`` from ``worker`` (fire and forget: about a millisecond, never waits)."""
    worker.log_event(topic, message.to_message())
