"""The slot watch on a clock the test moves: when it speaks, how often, and when it ends the campaign."""

from __future__ import annotations

import pytest

from cluster.executor import Slots
from search.loop.slot_watch import NoWorkers, SlotWatch, Waiting

NONE = Slots("CPU", 0, 0, 0)
ONE = Slots("CPU", 1, 1, 1)
TWO = Slots("CPU", 2, 1, 2)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def watch(timeout: float = 60.0) -> tuple[SlotWatch, list[str], Clock]:
    said: list[str] = []
    clock = Clock()
    return SlotWatch(timeout, said.append, clock), said, clock


def test_no_slot_is_said_after_10s_every_60s_then_ends_at_worker_timeout() -> None:
    slot_watch, said, clock = watch(timeout=150)
    waiting = Waiting(trials=3, width=1, number=7)
    for _ in range(10):  # 0 .. 9 s: a nanny's restart, nothing said
        slot_watch.check(NONE, waiting)
        clock.now += 1
    assert said == []
    slot_watch.check(NONE, waiting)  # 10 s
    assert len(said) == 1 and said[0].startswith("waiting for a worker with a free CPU slot since ")
    assert "(10 s)" in said[0] and "3 trial(s) in flight" in said[0] and "worker_timeout = 150 s" in said[0]
    clock.now += 59
    slot_watch.check(NONE, waiting)
    assert len(said) == 1  # not again before 60 s
    clock.now += 1
    slot_watch.check(NONE, waiting)
    assert len(said) == 2 and "(70 s)" in said[1]
    clock.now += 79
    slot_watch.check(NONE, waiting)  # 149 s
    clock.now += 1
    with pytest.raises(NoWorkers, match=r"no worker with a free CPU slot since .* \(150 s, \[cluster\] worker_timeout"):
        slot_watch.check(NONE, waiting)
    assert NoWorkers.exit_code == 3


def test_workers_back_are_said_and_the_clock_starts_again() -> None:
    slot_watch, said, clock = watch(timeout=60)
    waiting = Waiting(1, 1, 0)
    slot_watch.check(NONE, waiting)
    clock.now += 20
    slot_watch.check(NONE, waiting)
    clock.now += 20
    slot_watch.check(ONE, waiting)
    assert said[-1] == "workers back: 1 worker(s) with 1 CPU slot(s), after 40 s"
    clock.now += 50  # gone again: a new wait of its own, not 90 s of one
    slot_watch.check(NONE, waiting)
    clock.now += 59
    slot_watch.check(NONE, waiting)
    clock.now += 1
    with pytest.raises(NoWorkers):
        slot_watch.check(NONE, waiting)


def test_too_few_slots_for_a_wide_trial_is_said_but_never_ends_the_campaign() -> None:
    slot_watch, said, clock = watch(timeout=30)
    for _ in range(200):
        slot_watch.check(ONE, Waiting(2, 2, 5))
        clock.now += 1
    assert said[0].startswith("waiting for 2 CPU slots for trial 5 since ") and len(said) == 4
    slot_watch.check(TWO, Waiting(2, 2, 5))
    assert said[-1].startswith("workers back: 2 worker(s)")


def test_nothing_in_flight_is_no_wait_and_a_short_timeout_still_says_first() -> None:
    slot_watch, said, clock = watch(timeout=4)
    for _ in range(100):
        slot_watch.check(NONE, None)
        clock.now += 1
    assert said == []
    slot_watch.check(NONE, Waiting(1, 1, 0))
    clock.now += 2
    slot_watch.check(NONE, Waiting(1, 1, 0))  # say_after is at most half the timeout
    assert len(said) == 1
    with pytest.raises(ValueError, match="timeout=0"):
        SlotWatch(0, said.append)
