"""The dispatch-depth rules (pure functions) and the background asker (a real thread)."""

from __future__ import annotations

import threading
import time

import pytest

from search.loop.pipeline import MAX_AUTO_BATCH, Pipeline
from search.sampling.asker import AskFailed, BackgroundAsker


def test_auto_batch_is_one_until_durations_are_known_then_about_a_task_of_short_trials() -> None:
    auto = Pipeline()
    assert auto.batch(None, 0.0) == 1
    assert auto.batch(2.0, 0.0) == 1  # long trials: one per task
    assert auto.batch(0.1, 0.0) == 1
    assert auto.batch(0.01, 0.0) == 5
    assert auto.batch(0.0, 0.0) == MAX_AUTO_BATCH  # trivial trials
    assert auto.batch(0.0, 0.005) == 10  # a trial counts at least its sampling time


def test_auto_ahead_covers_the_finishes_during_one_round_trip() -> None:
    auto = Pipeline()
    assert auto.ahead(4, None) == 0  # nothing known: nothing queued
    assert auto.ahead(4, 0.1) == 4  # short trials: one per slot
    assert auto.ahead(4, 60.0) == 1  # long trials: one for the cluster
    assert auto.ahead(1024, 60.0) == 35  # 1024 slots end ~17 trials/s: 2 s of them
    assert auto.ahead(4, 0.001, batch=32) == 4  # in tasks, at most one per slot


def test_a_slow_sampler_gets_spare_trials_asked_ahead_a_fast_one_none() -> None:
    auto = Pipeline()
    assert auto.spare(4, 6.0, 0.001) == 0  # fast sampler: every sample sees the latest results
    assert auto.spare(4, None, 1.0) == 1  # slow, durations unknown: one in hand
    assert auto.spare(4, 6.0, 1.0) == 2  # 4 slots end 0.67 trials/s: twice that per 1 s ask
    assert auto.spare(4, 0.1, 1.0) == 4  # at most one per slot
    assert Pipeline(fixed=True).spare(4, 6.0, 1.0) == 0


def test_fixed_pipelines_and_settings_win_over_the_automatic_rules() -> None:
    assert Pipeline(fixed=True).ahead(4, 0.1) == 0
    assert Pipeline(fixed=True).batch(0.0, 0.0) == 1
    assert Pipeline(ahead_setting=3).ahead(4, None) == 3
    assert Pipeline(batch_setting=7).batch(None, 0.0) == 7


@pytest.mark.parametrize("kwargs", [{"ahead_setting": -2}, {"batch_setting": 0}, {"batch_setting": True}])
def test_bad_pipeline_settings_are_refused_with_the_rule(kwargs: dict) -> None:
    with pytest.raises(ValueError, match="must be|at least one"):
        Pipeline(**kwargs)


def _counter_asker(delay: float = 0.0) -> tuple[BackgroundAsker[int], list[int]]:
    wakes: list[int] = []
    counter = iter(range(1_000_000))

    def produce() -> int:
        time.sleep(delay)
        return next(counter)

    return BackgroundAsker(produce, lambda: wakes.append(1)), wakes


def _wait(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


@pytest.mark.timeout(30)
def test_the_asker_asks_exactly_what_is_wanted_in_order_and_wakes_the_loop() -> None:
    asker, wakes = _counter_asker()
    try:
        assert asker.take() is None and asker.in_hand() == 0
        asker.want(3)
        _wait(lambda: asker.in_hand() == 3 and not asker.busy)
        time.sleep(0.05)
        assert asker.in_hand() == 3  # no more than wanted
        assert [asker.take(), asker.take()] == [0, 1]
        time.sleep(0.05)
        assert asker.in_hand() == 1  # taking lowers the wanted count: no refill until asked again
        asker.want(2)
        _wait(lambda: asker.in_hand() == 2)
        assert len(wakes) >= 4 and asker.times.asked == 4 and asker.times.ask_seconds >= 0.0
    finally:
        assert asker.close() == [2, 3]


@pytest.mark.timeout(30)
def test_a_sampler_error_reaches_the_loop_as_ask_failed() -> None:
    def produce() -> int:
        raise RuntimeError("sampler broke")

    asker: BackgroundAsker[int] = BackgroundAsker(produce, lambda: None)
    asker.want(1)
    _wait(lambda: not asker.busy and asker.times.asked == 0 and asker._error is not None)  # noqa: SLF001
    with pytest.raises(AskFailed, match="sampler broke"):
        asker.take()
    asker.close()


@pytest.mark.timeout(30)
def test_close_waits_for_the_ask_in_progress_and_returns_it() -> None:
    asker, _ = _counter_asker(delay=0.3)
    asker.want(1)
    _wait(lambda: asker.busy)
    assert asker.close(timeout=5.0) == [0]
    assert not any(t.name.startswith("hypersweep-asker") for t in threading.enumerate())
