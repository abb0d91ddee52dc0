"""A worker's messages are typed on both sides: each survives its wire form (msgpack, with the address the scheduler
adds), and the controller tells them apart by their kind, never by which keys a dict happens to hold."""

from __future__ import annotations

import msgpack
import pytest

from cluster.outcome import Outcome, TrialStatus
from cluster.worker_messages import (
    KIND,
    MemoryPeak,
    PartStarted,
    RunnerReady,
    TrialAsked,
    TrialEnded,
    TrialReported,
    TrialStarted,
    WorkerMessage,
    decode,
)

MESSAGES: list[WorkerMessage] = [
    TrialStarted(3, 1700000000.5),
    TrialReported(3, 2, {"loss": 0.25}, 1700000001.0, memory=2**20),
    TrialReported(3, 4, {"loss": 0.125}, 1700000002.0),
    MemoryPeak(3, 2**21, 1700000003.0),
    TrialEnded(3, Outcome(TrialStatus.OK, {"loss": 0.1}, history=((2, {"loss": 0.25}, 1.0),), devices=(0,))),
    TrialAsked(3, {"op": "suggest_float", "name": "lr"}, 7, 1700000004.0),
    RunnerReady("campaign-runner-1", "tcp://10.0.0.1:4000", "Worker-abc"),
    PartStarted(3, 1, 1700000005.0),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_each_message_survives_the_wire_with_the_schedulers_address_added(message: WorkerMessage) -> None:
    wire = msgpack.unpackb(msgpack.packb(message.to_message()))
    assert "worker" not in wire  # the scheduler's key: no message field may take it
    wire["worker"] = "tcp://10.0.0.1:4000"  # as Scheduler.log_worker_event adds it
    assert decode(wire) == message


def test_every_kind_is_told_apart_by_its_tag() -> None:
    kinds = [type(m).kind for m in MESSAGES]
    assert len(set(kinds)) == len({type(m) for m in MESSAGES})
    assert all(m.to_message()[KIND] == type(m).kind for m in MESSAGES)


def test_a_dict_without_a_known_kind_is_no_message() -> None:
    ended = TrialEnded(3, Outcome(TrialStatus.OK)).to_message()
    assert decode({key: value for key, value in ended.items() if key != KIND}) is None  # keys alone say nothing
    assert decode({**ended, KIND: "from-a-newer-version"}) is None
    assert decode({}) is None
