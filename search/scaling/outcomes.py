"""What each trial of a scaling sweep did with its target: reached it, never reached it, or diverged.

A sweep's objective is the steps to reach the target (minimised), and only a
trial that reached it has such a number: one that never did is told twice the
steps it ran, so that the inner searches learn it was worse. Whoever ranks the
sweep's trials (``status``, the report) ranks only those that reached the
target and names the others by their outcome, read from the recorded reports.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from optuna.trial import FrozenTrial, TrialState

from search.scaling.target import TargetGoal
from search.spec.scaling import BATCH, OBJECTIVE
from search.store.records import TrialRecord
from search.vocab.terms import direction_of

if TYPE_CHECKING:
    from search.spec.campaign_spec import CampaignSpec

__all__ = ["TargetOutcome", "goal_of", "outcome_of", "SweepOutcomes", "sweep_outcomes", "status_lines", "LOSS"]

LOSS = "train_loss"  # the reported training loss a diverged trial is recognised by


class TargetOutcome(enum.Enum):
    """A finished trial against the sweep's target."""

    REACHED = "reached"
    NOT_REACHED = "not reached"  # trained its epochs, the metric never got to the target
    DIVERGED = "diverged"  # never reached it, and its training loss ended non-finite or above where it started


def goal_of(spec: CampaignSpec) -> TargetGoal | None:
    """The sweep's per-trial goal (``None`` for a spec without ``[scaling]``)."""
    if spec.scaling is None:
        return None
    return TargetGoal(
        spec.study.metrics[0], spec.scaling.target, direction_of(spec.study.directions[0]), spec.scaling.interpolate
    )


def _diverged(history: Sequence[tuple[int, Mapping[str, float]]]) -> bool:
    losses = [float(m[LOSS]) for _step, m in history if LOSS in m]
    if not losses:
        return False
    return not math.isfinite(losses[-1]) or losses[-1] >= losses[0]


def outcome_of(trial: FrozenTrial | TrialRecord, goal: TargetGoal) -> TargetOutcome:
    """Whether a finished trial reached ``goal``'s target in any report, and if not, whether it diverged."""
    history = TrialRecord.of(trial).history
    if any(goal.reached(metrics) for _step, metrics in history):
        return TargetOutcome.REACHED
    return TargetOutcome.DIVERGED if _diverged(history) else TargetOutcome.NOT_REACHED


@dataclasses.dataclass(frozen=True)
class SweepOutcomes:
    """The complete trials of a sweep by outcome: ``outcomes[number]``, ``ranked`` best first (fewest steps)."""

    goal: TargetGoal
    outcomes: Mapping[int, TargetOutcome]
    steps: Mapping[int, float]  # the objective value of each complete trial
    batch: Mapping[int, int]  # the batch size of each complete trial

    @property
    def ranked(self) -> list[int]:
        """The trials that reached the target, fewest steps first (ties: lower number)."""
        return sorted(self.reached, key=lambda n: (self.steps[n], n))

    @property
    def reached(self) -> set[int]:
        return {n for n, o in self.outcomes.items() if o is TargetOutcome.REACHED}

    def of(self, outcome: TargetOutcome) -> list[int]:
        return sorted(n for n, o in self.outcomes.items() if o is outcome)

    def state_label(self, number: int, state: str) -> str:
        """``state`` (a trial state's name), or ``NOT REACHED``/``DIVERGED`` for a complete trial short of it."""
        outcome = self.outcomes.get(number)
        return state if outcome is None or outcome is TargetOutcome.REACHED else outcome.value.upper()

    @property
    def target_text(self) -> str:
        """``val_accuracy >= 0.95``: what reaching the target means."""
        return f"{self.goal.metric} {self.goal.comparison} {self.goal.target:g}"

    def counts_text(self) -> str:
        """``30 of 44 complete trials reached val_accuracy >= 0.95; 10 never did; 4 diverged``."""
        total = len(self.outcomes)
        text = f"{len(self.reached)} of {total} complete trial(s) reached {self.target_text}"
        never, diverged = self.of(TargetOutcome.NOT_REACHED), self.of(TargetOutcome.DIVERGED)
        if never:
            text += f"; {len(never)} never did"
        if diverged:
            text += f"; {len(diverged)} diverged (training loss ended non-finite or above its start)"
        return text


def sweep_outcomes(spec: CampaignSpec, trials: Iterable[FrozenTrial | TrialRecord]) -> SweepOutcomes | None:
    """The complete trials' outcomes (``None`` for a spec without ``[scaling]``)."""
    goal = goal_of(spec)
    if goal is None:
        return None
    outcomes: dict[int, TargetOutcome] = {}
    steps: dict[int, float] = {}
    batch: dict[int, int] = {}
    for trial in trials:
        record = TrialRecord.of(trial)
        if record.state != TrialState.COMPLETE or not record.values:
            continue
        outcomes[record.number] = outcome_of(record, goal)
        steps[record.number] = float(record.values[0])
        size = record.params.get(BATCH, record.batch)
        batch[record.number] = int(size) if size is not None else 0
    return SweepOutcomes(goal, outcomes, steps, batch)


def status_lines(spec: CampaignSpec, trials: Sequence[FrozenTrial]) -> list[str]:
    """``hypersweep status`` of a sweep: the objective, the outcomes, the best trial and the best per batch size."""
    view = sweep_outcomes(spec, trials)
    assert view is not None and spec.scaling is not None
    lines = [f"  objective: minimize {OBJECTIVE} (optimizer steps until {view.target_text})"]
    if not view.outcomes:
        return lines + ["  best: none yet"]
    lines.append("  " + view.counts_text())
    ranked = view.ranked
    if not ranked:
        return lines + [f"  best: none (no trial reached {view.target_text})"]
    by_number = {t.number: t for t in trials}
    best = ranked[0]
    lines.append(f"  best {OBJECTIVE} = {view.steps[best]:.6g} (trial {best}), params {by_number[best].params}")
    lines.append("  per batch size: " + "; ".join(_per_batch(view, b) for b in spec.scaling.batch_sizes))
    return lines


def _per_batch(view: SweepOutcomes, b: int) -> str:
    mine = [n for n, size in view.batch.items() if size == b]
    reached = [n for n in view.ranked if view.batch[n] == b]
    if not mine:
        return f"B={b} no complete trial"
    if not reached:
        diverged = sum(view.outcomes[n] is TargetOutcome.DIVERGED for n in mine)
        return f"B={b} not reached (0/{len(mine)}" + (f", {diverged} diverged)" if diverged else ")")
    return f"B={b} {view.steps[reached[0]]:.4g} steps (trial {reached[0]}, {len(reached)}/{len(mine)} reached)"
