"""``status`` names each running trial's width, and its segment once it has begun a second (issue 51 point 4)."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from search.reports.status import width_text
from search.store.records import Attr


def running(attrs: dict[str, object]) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(state=TrialState.RUNNING, user_attrs=attrs)


def test_a_running_trial_shows_its_width_and_its_segment() -> None:
    assert width_text(running({})) == "width 1"
    assert width_text(running({Attr.CONFIG: {"data_parallel": 2}})) == "width 2"
    grown = {
        Attr.CONFIG: {"data_parallel": 4},
        Attr.SEGMENTS: [{"transition": "start", "width": 1}, {"transition": "resize", "width": 4}],
    }
    assert width_text(running(grown)) == "width 4 (segment 2: resize)"
