"""What the x of a trial's reports is: the epoch when every report says so, else the step the trainer gave;
for learning curves, the examples seen where steps or epochs do not count the same training across trials.

The built-in trainer reports once per epoch with ``step = epoch``; a learning-curve panel labelled
"step (as reported)" read as optimizer steps, which it is not. Trials with different batch sizes or widths (or one
whose batch changed between segments, a resize) that report per step have seen different numbers of examples at
the same step: where every report counts its ``examples`` and their ratio to the step differs, the learning
curves are drawn against the examples seen (:func:`curve_axis`), the one axis on which they compare.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

__all__ = ["EPOCH", "REPORTED", "EXAMPLES_SEEN", "step_label", "curve_axis", "curve_x"]

EPOCH = "epoch"
REPORTED = "report step (as the trainer numbered it)"
EXAMPLES_SEEN = "examples seen (the trials' steps differ in batch size or width)"
EXAMPLES = "examples"  # the report metric a trainer counts them in (search.loop.segments.EXAMPLES)


def step_label(histories: Iterable[Sequence[tuple[int, Mapping[str, float]]]]) -> str:
    """``"epoch"`` when every report of every history carries an ``epoch`` metric equal to its step."""
    reports = [(step, metrics) for history in histories for step, metrics in history]
    if reports and all(metrics.get("epoch") == step for step, metrics in reports):
        return EPOCH
    return REPORTED


def curve_axis(histories: Iterable[Sequence[tuple[int, Mapping[str, float]]]]) -> str:
    """:data:`EXAMPLES_SEEN` when every report counts its examples and the examples per step differ between
    reports (trials of different batch sizes or widths, or a trial resized on the way), else :func:`step_label`."""
    shown = [list(history) for history in histories]
    reports = [(step, metrics) for history in shown for step, metrics in history]
    if reports and all(EXAMPLES in metrics for _step, metrics in reports):
        ratios = {round(metrics[EXAMPLES] / step, 6) for step, metrics in reports if step > 0}
        if len(ratios) > 1:
            return EXAMPLES_SEEN
    return step_label(shown)


def curve_x(axis: str, step: int, metrics: Mapping[str, float]) -> float:
    """A report's x on ``axis`` (:func:`curve_axis`): its examples seen, else its step."""
    return float(metrics[EXAMPLES]) if axis == EXAMPLES_SEEN else float(step)
