"""The loop's garbage-collection policy: survivors frozen every few seconds, everything swept now and then."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from bench.simulate import simulate
from search.store import heap
from search.store.heap import SurvivorFreezer


class _Node:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _freezer(interval: float, sweep: float, enabled: bool | None = True) -> tuple[SurvivorFreezer, _Clock]:
    """A freezer on a clock the test moves."""
    clock = _Clock()
    return SurvivorFreezer(interval, sweep, enabled=enabled, clock=clock), clock


@pytest.fixture
def collector_state() -> Iterator[None]:
    """Whatever a test does to the collector and the owned-heap flag is undone."""
    was_enabled, was_owned = gc.isenabled(), heap.heap_owned()
    gc.enable()
    gc.unfreeze()
    try:
        yield
    finally:
        gc.unfreeze()
        heap.freeze_after_loads(was_owned)
        (gc.enable if was_enabled else gc.disable)()


@pytest.mark.parametrize(("interval", "sweep"), [(0.0, 1.0), (1.0, float("nan")), (-1.0, 1.0)])
def test_a_period_that_is_not_a_positive_number_of_seconds_is_refused(interval: float, sweep: float) -> None:
    with pytest.raises(ValueError, match="must be a number of seconds > 0"):
        SurvivorFreezer(interval, sweep, enabled=True)


@pytest.mark.usefixtures("collector_state")
def test_survivors_are_frozen_once_the_interval_has_passed_and_dead_young_cycles_are_freed_first() -> None:
    freezer, clock = _freezer(2.0, 600.0)
    dead = _Node()
    gone = weakref.ref(dead)
    del dead
    kept = _Node()
    clock.now = 1.9
    freezer.tick()
    assert freezer.freezes == 0 and gc.get_freeze_count() == 0  # not due yet
    clock.now = 2.0
    freezer.tick()
    assert freezer.freezes == 1 and freezer.sweeps == 0
    assert gone() is None  # a dead cycle is collected, not frozen
    assert gc.get_freeze_count() > 0 and all(o is not kept for o in _unfrozen())  # left the collector's walks


def _unfrozen() -> list[object]:
    return [o for generation in range(3) for o in gc.get_objects(generation)]


@pytest.mark.usefixtures("collector_state")
def test_a_cycle_that_died_while_frozen_is_freed_by_the_next_sweep() -> None:
    freezer, clock = _freezer(2.0, 10.0)
    node = _Node()
    gone = weakref.ref(node)
    clock.now = 2.0
    freezer.tick()  # the node is frozen while alive
    del node
    gc.collect()
    assert gone() is not None  # frozen: a full collection does not walk it
    clock.now = 10.0
    freezer.tick()
    assert freezer.sweeps == 1 and gone() is None


@pytest.mark.usefixtures("collector_state")
def test_nothing_is_frozen_in_a_process_that_does_not_own_its_heap_or_with_the_collector_off() -> None:
    heap.freeze_after_loads(False)
    freezer, clock = _freezer(1.0, 10.0, enabled=None)  # enabled: as the process declared
    clock.now = 5.0
    freezer.tick()
    assert freezer.freezes == 0 and gc.get_freeze_count() == 0
    gc.disable()
    owned = SurvivorFreezer(1.0, 10.0, enabled=True, clock=clock)
    clock.now = 20.0
    owned.tick()
    assert owned.freezes == 0 and gc.get_freeze_count() == 0  # the user turned the collector off: left alone


@pytest.mark.usefixtures("collector_state")
@pytest.mark.parametrize("owned", [True, False])
def test_the_campaign_loop_freezes_what_it_keeps_only_in_a_process_that_owns_its_heap(
    owned: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(heap, "FREEZE_SECONDS", 1e-6)  # due at every loop iteration
    heap.freeze_after_loads(owned)
    unfrozen_at_the_end: list[set[int]] = []
    release = SurvivorFreezer.release

    def see_then_release(self: SurvivorFreezer) -> None:  # the loop's heap as the campaign ends
        unfrozen_at_the_end.append({id(o) for o in _unfrozen()})
        release(self)

    monkeypatch.setattr(SurvivorFreezer, "release", see_then_release)
    result, _executor, study = simulate(16, "random", 48, storage="journal")
    assert result.trials == 48 and len(study.trials) == 48
    told = study.get_trials(deepcopy=False)[0]  # made by the loop when it told the trial, after the study's load
    assert (id(told) not in unfrozen_at_the_end[0]) is owned
    assert gc.get_freeze_count() == 0  # given back when the campaign ended: its dead cycles can be freed


def test_a_freezer_gives_back_what_it_froze_and_only_if_it_froze(collector_state: None) -> None:
    freezer, clock = _freezer(1.0, 10.0, enabled=True)
    freezer.release()
    gc.freeze()  # someone else's freeze: not this freezer's to give back
    assert gc.get_freeze_count() > 0
    freezer.release()
    assert gc.get_freeze_count() > 0
    gc.unfreeze()
    clock.now = 5.0
    freezer.tick()
    assert freezer.freezes == 1 and gc.get_freeze_count() > 0
    freezer.release()
    assert gc.get_freeze_count() == 0
