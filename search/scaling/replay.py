"""``hypersweep reproduce`` of a scaling-sweep trial: stop where the campaign stopped it, at its target.

The campaign stops a sweep trial once a report reaches the target (the stop
request takes effect after the report the trial is making when it arrives), and
records no stop reason for it: the trial is COMPLETE with the steps it took. A
replay that ran all the spec's epochs would compare 40 epochs with a record of
8. :func:`replay_plan` says how many reports the replay makes (as many as the
record: the target report and any the stop let through), and
:func:`replay_notes` checks, after the run, that the replay reached the target
at the same report as the record (a ``MISMATCH`` note otherwise).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from optuna.trial import TrialState

from search.scaling.outcomes import goal_of
from search.scaling.target import TargetGoal
from search.store.records import TrialRecord
from spaces.errors import InputError

if TYPE_CHECKING:
    from search.spec.campaign_spec import CampaignSpec

__all__ = ["ReplayPlan", "sweep_replay", "replay_plan", "replay_notes", "first_target_report"]

History = Sequence[tuple[int, Mapping[str, float]]]


@dataclasses.dataclass(frozen=True)
class ReplayPlan:
    """How a sweep trial is replayed: ``stop_after`` reports (``None``: all its epochs), against ``goal``."""

    goal: TargetGoal
    stop_after: int | None
    recorded_hit: int | None  # the index of the recorded report that reached the target


def first_target_report(history: History, goal: TargetGoal) -> int | None:
    """The index (0-based) of the first report in ``history`` that reaches ``goal``'s target."""
    return next((i for i, (_step, metrics) in enumerate(history) if goal.reached(metrics)), None)


def sweep_replay(spec: CampaignSpec, trial: TrialRecord) -> ReplayPlan | None:
    """The replay plan of a sweep trial (``None`` for a spec without ``[scaling]``)."""
    goal = goal_of(spec)
    return None if goal is None else replay_plan(goal, trial)


def replay_plan(goal: TargetGoal, trial: TrialRecord) -> ReplayPlan:
    """Stop the replay after the recorded reports when the record reached the target, or the campaign stopped it
    short of it (``outpaced``); else run every epoch.

    Raises ``InputError`` (one line) for a complete sweep trial with no recorded
    reports: where it reached its target cannot be known, so it cannot be replayed.
    """
    history = trial.history
    if not history:
        raise InputError(
            f"trial {trial.number} of the scaling sweep recorded no reports: where it reached "
            f"{goal.metric} {goal.comparison} {goal.target:g} is unknown, "
            f"so it cannot be replayed"
        )
    hit = first_target_report(history, goal)
    stopped = trial.state == TrialState.PRUNED or bool(trial.stop_reason)  # e.g. outpaced: stopped short of it
    return ReplayPlan(goal, len(history) if hit is not None or stopped else None, hit)


def replay_notes(plan: ReplayPlan, recorded: History, reproduced: History) -> list[str]:
    """Where the record and the replay reached the target; a ``MISMATCH`` note when not at the same report."""
    target = f"{plan.goal.metric} {plan.goal.comparison} {plan.goal.target:g}"
    hit = first_target_report(reproduced, plan.goal)
    if plan.recorded_hit is None:
        if hit is None:
            return [f"scaling sweep: neither the record nor the replay reached {target} in {len(reproduced)} report(s)"]
        return [f"MISMATCH: the record never reached {target}, the replay did at step {reproduced[hit][0]}"]
    where = f"step {recorded[plan.recorded_hit][0]} (report {plan.recorded_hit + 1} of {len(recorded)})"
    if hit is None:
        return [
            f"MISMATCH: the record reached {target} at {where}, the replay never did in {len(reproduced)} report(s)"
        ]
    if hit != plan.recorded_hit:
        return [f"MISMATCH: the record reached {target} at {where}, the replay at step {reproduced[hit][0]}"]
    return [
        f"scaling sweep: stopped at the target as the campaign did: {target} reached at {where} in the record "
        f"and in the replay, which made the same {plan.stop_after} report(s)"
    ]
