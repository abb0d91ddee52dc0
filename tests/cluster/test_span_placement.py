"""How a trial wider than a worker is cut into parts, and why two wide trials never hold half their slots each."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cluster.outcome import Outcome, TrialStatus
from cluster.span import Part, SpanPlacer, SpanTrial, merge_outcomes, plan_parts
from trainers.ddp_span import RankSpan


def test_parts_take_the_freest_workers_first_and_as_few_as_hold_the_width() -> None:
    capacity = {"tcp://a:1": (2.0, 2.0), "tcp://b:1": (2.0, 0.0), "tcp://c:1": (4.0, 3.0)}
    # b has 2 free, c 1 free, a none: b's 2 ranks, then c's (it could give 4) take the rest.
    assert plan_parts(capacity, 5) == [Part("tcp://b:1", 2, 0), Part("tcp://c:1", 3, 2)]
    assert plan_parts(capacity, 2) == [Part("tcp://b:1", 2, 0)]  # fits on one: one part
    assert sum(p.local for p in plan_parts(capacity, 8)) == 8


def test_a_width_no_set_of_workers_holds_is_refused_with_the_total() -> None:
    with pytest.raises(ValueError, match="a trial of 5 slots does not fit: the 2 workers have 4 in all"):
        plan_parts({"tcp://a:1": (2.0, 0.0), "tcp://b:1": (2.0, 0.0)}, 5)


def _placer() -> tuple[SpanPlacer, list[int]]:
    placed: list[int] = []

    def place(request: SimpleNamespace) -> SpanTrial:
        placed.append(request.number)
        return SpanTrial(request.number, f"k{request.number}", [Part("a", 2, 0), Part("b", 1, 2)])

    return SpanPlacer(place), placed


def test_the_next_wide_trial_is_placed_only_once_every_part_of_the_one_before_started() -> None:
    placer, placed = _placer()
    placer.submit(SimpleNamespace(number=1))
    placer.submit(SimpleNamespace(number=2))
    assert placed == [1], "trial 2 must wait while trial 1 is half placed"
    placer.trials[1].started[0] = 1.0
    placer.next()
    assert placed == [1], "one part of two started is still half placed"
    placer.trials[1].started[1] = 2.0
    placer.next()
    assert placed == [1, 2]


def test_a_trial_that_ended_half_placed_lets_the_next_one_go() -> None:
    placer, placed = _placer()
    placer.submit(SimpleNamespace(number=1))
    placer.submit(SimpleNamespace(number=2))
    placer.trials[1].aborted = "lost: worker b left"
    placer.next()
    assert placed == [1, 2]
    placer.forget(1)
    assert set(placer.trials) == {2}


def test_the_outcome_names_the_part_that_failed_first_and_keeps_every_ranks_timings() -> None:
    trial = SpanTrial(3, "k", [Part("tcp://a:1", 1, 0), Part("tcp://b:1", 1, 1)])
    trial.outcomes[0] = Outcome(
        TrialStatus.ERROR, error="RankError: ranks 0..0 ended: part 1 failed", started=10.0, finished=14.0
    )
    trial.outcomes[1] = Outcome(
        TrialStatus.ERROR,
        error="ValueError: boom",
        error_type="ValueError",
        started=11.0,
        finished=12.0,
        ranks=({"rank": 1, "epoch_seconds": [0.5]},),
    )
    trial.first_failure = 1
    merged = merge_outcomes(trial)
    assert merged.status == TrialStatus.ERROR and merged.error_type == "ValueError"
    assert merged.error == "part 1 on tcp://b:1: ValueError: boom"
    assert merged.ranks == ({"rank": 1, "epoch_seconds": [0.5], "worker": "tcp://b:1", "part": 1},)
    assert (merged.started, merged.finished) == (10.0, 14.0)


def test_a_rank_span_must_hold_its_ranks() -> None:
    span = RankSpan(4, 2, 2, "10.0.0.1", 29500)
    assert list(span.ranks) == [2, 3] and not span.holds_rank0
    with pytest.raises(ValueError, match="first_rank=3: must leave room for 2 ranks of 4"):
        RankSpan(4, 3, 2, "10.0.0.1", 29500)
    with pytest.raises(ValueError, match="master_port=0"):
        RankSpan(4, 0, 2, "10.0.0.1", 0)
