"""bench/elastic.py's simulated ASHA: every setting runs the same trials through the same rungs; slots are never
over-used; elastic trials grow only when slots are free."""

from __future__ import annotations

import collections

import pytest

from bench import elastic


@pytest.mark.parametrize(("mode", "width"), [("fixed", 1), ("fixed", 4), ("elastic", 1)])
def test_every_trial_reports_its_first_rung_once_and_asha_promotes_a_third(mode: str, width: int) -> None:
    pool = elastic.trials(27, seed=0)
    reports = elastic.simulate(pool, 4, mode, width)
    times = [t for t, _v in reports]
    assert times == sorted(times)
    per_rung = collections.Counter(round(v, 12) for _t, v in reports)  # values are distinct: one report each
    assert sum(per_rung.values()) == len(reports)
    assert len(reports) >= 27 + 9 + 3  # every trial at rung 0, a third of them at rung 1, a ninth at rung 2


def test_elastic_runs_its_promoted_trials_wider_and_reaches_the_common_target_no_later_on_many_slots() -> None:
    result = elastic.compare(64, seed=0)
    assert result["elastic"][0] < min(result["fixed-1"][0], result["fixed-8"][0])
    assert result["elastic"][1] == pytest.approx(result["fixed-1"][1])  # the same trials: the same best
