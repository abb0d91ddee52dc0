"""What the x of a trial's reports is: the epoch when every report says so, else the step the trainer gave.

The built-in trainer reports once per epoch with ``step = epoch``; a learning-curve panel labelled
"step (as reported)" read as optimizer steps, which it is not.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

__all__ = ["EPOCH", "REPORTED", "step_label"]

EPOCH = "epoch"
REPORTED = "report step (as the trainer numbered it)"


def step_label(histories: Iterable[Sequence[tuple[int, Mapping[str, float]]]]) -> str:
    """``"epoch"`` when every report of every history carries an ``epoch`` metric equal to its step."""
    reports = [(step, metrics) for history in histories for step, metrics in history]
    if reports and all(metrics.get("epoch") == step for step, metrics in reports):
        return EPOCH
    return REPORTED
