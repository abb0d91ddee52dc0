"""The progress line of a campaign in rounds (a scaling sweep's ``lr_grid``, its branching study): each round is a
campaign of its own and the expected end shown is that round's, so the line says which round it is the end of."""

from __future__ import annotations

import dataclasses
import io

import optuna

from cluster.trial_cost import Estimate
from search.loop.campaign import Snapshot
from search.loop.eta import Eta
from search.loop.progress import Progress
from search.scaling.lr_grid import SCALING_ROUND, round_label
from search.spec.scaling import ScalingSpec

SNAPSHOT = Snapshot(3, 0, 0, 2, 11, 0.5, 65.0, eta=Eta(Estimate(250.0, 230.0, 280.0), 4))


def test_the_progress_line_says_the_expected_end_is_the_running_rounds() -> None:
    stream = io.StringIO()
    progress = Progress(stream, redraw=0.0)
    progress(SNAPSHOT)
    progress.in_round("round 2")
    progress(dataclasses.replace(SNAPSHOT, complete=4))
    progress.in_round("")
    progress(dataclasses.replace(SNAPSHOT, complete=5))
    first, second, third = stream.getvalue().splitlines()
    assert first.endswith(", 0:01:05, ends in ~4m10s (3m50s-4m40s)"), first
    assert second.endswith(", 0:01:05, round 2 ends in ~4m10s (3m50s-4m40s)"), second
    assert third.endswith(", 0:01:05, ends in ~4m10s (3m50s-4m40s)"), third


def test_a_sweeps_round_is_counted_from_1_the_grid_as_its_trials_record_it() -> None:
    scaling = ScalingSpec(batch_sizes=(16, 64, 256), target=0.9, lr_grid=3)
    study = optuna.create_study()
    assert round_label(scaling, study.get_trials()) == "round 1"  # nothing enqueued yet: the grid comes first
    study.enqueue_trial({}, user_attrs={SCALING_ROUND: 0})
    assert round_label(scaling, study.get_trials()) == "round 1"
    study.enqueue_trial({}, user_attrs={SCALING_ROUND: 1})
    assert round_label(scaling, study.get_trials()) == "round 2"
    assert round_label(ScalingSpec(batch_sizes=(16, 64, 256), target=0.9), study.get_trials()) == ""  # no rounds
    assert round_label(None, study.get_trials()) == ""
