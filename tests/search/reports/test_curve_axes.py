"""Learning-curve and LR panels: labelled by what their x is (epochs when the trainer reported epochs), legends off the data."""

from __future__ import annotations

from search.reports import plots
from search.reports.step_axis import EPOCH, EXAMPLES_SEEN, REPORTED, curve_axis, step_label

BY_EPOCH = [(1, {"epoch": 1.0, "val_loss": 2.0}), (2, {"epoch": 2.0, "val_loss": 1.5})]
BY_STEP = [(100, {"val_loss": 2.0}), (200, {"val_loss": 1.5})]


def test_reports_numbered_by_their_epoch_are_labelled_epoch() -> None:
    assert step_label([BY_EPOCH, BY_EPOCH]) == EPOCH == "epoch"
    assert step_label([BY_EPOCH, BY_STEP]) == REPORTED
    assert step_label([]) == REPORTED


def test_learning_curve_panels_name_the_epoch_axis() -> None:
    drawn = plots.learning_curves({0: ("COMPLETE", BY_EPOCH), 1: ("COMPLETE", BY_EPOCH)}, ["val_loss"])
    assert [ax.get_xlabel() for ax in (drawn.figure.axes if drawn.figure else []) if ax.get_visible()] == ["epoch"]
    drawn = plots.learning_curves({0: ("COMPLETE", BY_STEP)}, ["val_loss"])
    assert drawn.figure is not None and drawn.figure.axes[0].get_xlabel() == REPORTED


def test_learning_curve_and_lr_legends_stand_under_the_panels() -> None:
    """A legend on the first panel covered other trials' curves."""
    drawn = plots.learning_curves({n: ("COMPLETE", BY_EPOCH) for n in range(3)}, ["val_loss"], highlight=[0])
    assert drawn.figure is not None and drawn.figure.axes[0].get_legend() is None and len(drawn.figure.legends) == 1
    drawn = plots.lr_curves({0: ([(1, 0.1), (2, 0.2)], "reported")}, EPOCH)
    assert drawn.figure is not None and drawn.figure.axes[0].get_legend() is None and len(drawn.figure.legends) == 1
    assert drawn.figure.axes[0].get_xlabel() == "epoch"


def test_trials_of_different_batch_sizes_reporting_per_step_are_drawn_against_examples_seen() -> None:
    """At step 100 a batch-64 trial has seen twice the examples of a batch-32 one: the curves compare on examples."""
    small = [(s, {"examples": 32.0 * s, "val_loss": 2.0 / s}) for s in (100, 200)]
    large = [(s, {"examples": 64.0 * s, "val_loss": 1.0 / s}) for s in (100, 200)]
    assert curve_axis([small, large]) == EXAMPLES_SEEN and curve_axis([small, small]) == REPORTED
    assert curve_axis([BY_EPOCH, BY_EPOCH]) == EPOCH  # no examples counted: as before
    drawn = plots.learning_curves({0: ("COMPLETE", small), 1: ("COMPLETE", large)}, ["val_loss"])
    assert drawn.figure is not None and drawn.figure.axes[0].get_xlabel() == EXAMPLES_SEEN
    xs = sorted(x for line in drawn.figure.axes[0].get_lines() for x in line.get_xdata())
    assert xs == [3200.0, 6400.0, 6400.0, 12800.0]
