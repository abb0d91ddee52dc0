"""The goodput choice: which trials get free slots (and which give them back), with a reserve and a cap."""

from __future__ import annotations

import pytest

from cluster.goodput import Goodput, StepModel
from search.elastic.allocate import Candidate, Finishing, grow, hurry, shrink

COMPUTE_BOUND = StepModel(alpha_c=0.001, beta_c=0.01, alpha_n=0.002)  # nearly linear speedup
COMM_BOUND = StepModel(alpha_c=0.001, beta_c=0.001, alpha_n=0.2, beta_n=0.05)  # width barely helps, even hurts


def trial(number: int, model: StepModel, width: int = 1, **kwargs: object) -> Candidate:
    return Candidate(number, width, Goodput(model, base_batch=64, **kwargs))  # type: ignore[arg-type]


def test_free_slots_go_to_the_trial_that_gains_most_per_slot() -> None:
    chosen = grow([trial(0, COMM_BOUND), trial(1, COMPUTE_BOUND)], free=1, widths=[1, 2, 4])
    assert chosen == {1: 2}


def test_a_trial_whose_goodput_does_not_gain_enough_gets_no_slot() -> None:
    assert grow([trial(0, COMM_BOUND)], free=8, widths=[1, 2, 4]) == {}


def test_the_reserve_is_kept_for_new_trials_and_the_cap_per_trial_holds() -> None:
    two = [trial(0, COMPUTE_BOUND), trial(1, COMPUTE_BOUND)]
    assert grow(two, free=3, widths=[1, 2, 4], reserve=2) == {0: 2}  # 1 slot to give: the lower number
    assert grow(two, free=8, widths=[1, 2, 4], max_slots=2) == {0: 2, 1: 2}
    assert grow(two, free=6, widths=[1, 2, 4]) == {0: 4, 1: 4}


def test_slots_are_spread_where_the_marginal_gain_is_higher() -> None:
    """Speedup per slot falls with width (the all-reduce), so 2 + 2 beats 4 + 1 for two equal trials."""
    two = [trial(0, COMPUTE_BOUND), trial(1, COMPUTE_BOUND)]
    assert grow(two, free=2, widths=[1, 2, 4]) == {0: 2, 1: 2}


def test_in_grow_mode_a_small_noise_scale_makes_growing_not_worth_it() -> None:
    noisy = trial(0, COMPUTE_BOUND, grow=True, b_noise=1e6)  # efficiency ~1 at 4x the batch
    clean = trial(1, COMPUTE_BOUND, grow=True, b_noise=1.0)  # efficiency ~1/4 at 4x: no goodput gained
    assert grow([noisy, clean], free=3, widths=[1, 2, 4]) == {0: 4}


def test_shrink_takes_slots_where_the_least_speedup_is_lost() -> None:
    wide = [trial(0, COMPUTE_BOUND, width=4), trial(1, COMM_BOUND, width=4)]
    assert shrink(wide, needed=2, widths=[1, 2, 4]) == {1: 2}
    assert shrink(wide, needed=1, widths=[1, 2, 4]) == {1: 2}  # the smallest step that frees enough
    assert shrink([trial(0, COMPUTE_BOUND)], needed=1, widths=[1, 2, 4]) == {}  # nothing to give
    # more wanted than the widest width: as many as the candidates can give (once none came back at all)
    assert shrink([trial(0, COMPUTE_BOUND, width=2)], needed=4, widths=[1, 2]) == {0: 1}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"widths": []}, "widths=\\[\\]"), ({"widths": [0, 2]}, "each >= 1"), ({"free": -1}, "free slots=-1")],
)
def test_bad_arguments_are_refused_naming_the_value(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"candidates": [trial(0, COMPUTE_BOUND)], "free": 2, "widths": [1, 2], **kwargs}
    with pytest.raises(ValueError, match=message):
        grow(**args)  # type: ignore[arg-type]


# --- hurry: a trial past the last rung against the trials queued behind it ----------------------------------

RING = StepModel(alpha_c=0.005, beta_c=0.001, alpha_n=0.01, beta_n=0.002)  # speedup 1.68x at 2, 2.6x at 4


def finishing(number: int, epochs_left: float, width: int = 1, restart: float = 5.0) -> Finishing:
    """A trial at ``width`` with ``epochs_left`` epochs of 10,000 examples at a fixed global batch of 128."""
    return Finishing(Candidate(number, width, Goodput(RING, base_batch=128)), epochs_left * 10_000, restart, 10.0)


def test_a_finishing_trial_takes_a_slot_where_its_result_comes_sooner_than_the_queue_is_delayed() -> None:
    """18 epochs left at 10.4 s: at width 2 its result comes 71 s sooner for 55 extra slot-seconds. On 4 slots with
    2 trials expected past the last rung (share 1/2): 35.5 s > 2 x 55 / 4 = 27.6 s, it grows. With one epoch left
    the restart eats the gain; with 32 expected there (share 1/32) the delay they add up to is far larger. On 64
    slots the delay is spread wider: it grows at share 1/4 (17.7 s > 3.4 s), not at 1/32 (2.2 s < 27.6 s)."""
    assert hurry([finishing(0, 18)], room=1, slots=4, widths=[1, 2, 4], share=0.5) == {0: 2}
    assert hurry([finishing(0, 1)], room=1, slots=4, widths=[1, 2, 4], share=0.5) == {}
    assert hurry([finishing(0, 18)], room=1, slots=4, widths=[1, 2, 4], share=1 / 32) == {}
    assert hurry([finishing(0, 18)], room=1, slots=64, widths=[1, 2, 4], share=1 / 4) == {0: 2}
    assert hurry([finishing(0, 18)], room=1, slots=64, widths=[1, 2, 4], share=1 / 32) == {}


def test_hurry_goes_one_width_at_a_time_and_the_slot_goes_where_it_gains_most() -> None:
    two = [finishing(0, 6), finishing(1, 17)]
    assert hurry(two, room=1, slots=4, widths=[1, 2, 4], share=0.84) == {1: 2}  # more time saved per slot
    assert hurry(two, room=4, slots=4, widths=[1, 2, 4], share=0.84) == {0: 2, 1: 2}  # one step each
    assert hurry(two, room=4, slots=4, widths=[1, 2, 4], share=0.5) == {1: 2}  # 6 epochs: not worth it at 1/2
    assert hurry([finishing(0, 17, width=2)], room=1, slots=4, widths=[1, 2, 4], share=0.84) == {}  # 2 -> 4: 2 slots


def test_finishing_net_is_the_time_saved_weighed_against_the_delay_behind_it() -> None:
    f = finishing(0, 18)
    saved = f.seconds(1) - f.seconds(2) - 5.0
    extra = 2 * (f.seconds(2) + 5.0) + 10.0 - f.seconds(1)
    assert f.net(2, 4, 0.5) == pytest.approx(0.5 * saved - 2 * extra / 4)
    assert f.net(1, 4, 0.5) == 0.0
    with pytest.raises(ValueError, match="share=2"):
        hurry([f], room=1, slots=4, widths=[1, 2], share=2.0)
