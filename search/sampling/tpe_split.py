"""The trials a TPE refit models, split into "below" and "above" as Optuna splits them, in one pass.

A refit of :class:`~search.sampling.tpe.RefitTPESampler` took the study's trials, dropped the asking
trial (the constant liar), counted the finished ones for gamma, and called Optuna's ``_split_trials``.
That is three walks over every trial, a constraint lookup per finished trial at every refit, and two
sorts by number of lists already in number order: at 20,000 trials, 40% of a refit (bench/NOTES.md,
session 19). :func:`split_for_refit` does the same in one walk, keeps each finished trial's
infeasibility score (its constraints are stored before it is told and never change), and keeps
the study's order instead of sorting by number. The sub-splits are Optuna's own functions, so the
result is Optuna's list for list (tested against ``_split_trials``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from search.compat import optuna_private as op

__all__ = ["split_for_refit"]

_RUNNING, _COMPLETE, _PRUNED = TrialState.RUNNING, TrialState.COMPLETE, TrialState.PRUNED


def split_for_refit(
    study: Study,
    trials: Sequence[FrozenTrial],
    asking: int,
    gamma: Callable[[int], int],
    scores: dict[int, float],
) -> tuple[list[FrozenTrial], list[FrozenTrial]]:
    """``trials`` (complete, pruned and running) without trial number ``asking``, split as Optuna's
    ``_split_trials(study, trials, gamma(finished))`` splits them; ``scores`` keeps each finished trial's
    infeasibility score by number, across calls."""
    complete: list[FrozenTrial] = []
    pruned: list[FrozenTrial] = []
    infeasible: list[FrozenTrial] = []
    kept: list[FrozenTrial] = []
    ordered, last = True, -1
    for trial in trials:
        number = trial.number
        if number == asking:
            continue
        kept.append(trial)
        ordered, last = ordered and number > last, number
        state = trial.state
        if state == _RUNNING:  # before the feasibility check: its constraints are not set yet
            continue
        score = scores.get(number)
        if score is None:
            score = scores[number] = op.infeasible_score(trial)
        if score > 0:
            infeasible.append(trial)
        elif state == _COMPLETE:
            complete.append(trial)
        elif state == _PRUNED:
            pruned.append(trial)
        else:
            raise ValueError(f"trial {number} is {state.name}: a refit models complete, pruned and running trials")
    n_below = gamma(len(complete) + len(pruned) + len(infeasible))
    below_complete, _ = op.split_complete(complete, study, n_below)
    n_below = max(0, n_below - len(below_complete))
    below_pruned, _ = op.split_pruned(pruned, study, n_below)
    n_below = max(0, n_below - len(below_pruned))
    below_infeasible, _ = op.split_infeasible(infeasible, n_below)
    below = {id(t) for t in (*below_complete, *below_pruned, *below_infeasible)}
    if not ordered:  # Optuna's order: by number
        kept.sort(key=lambda trial: trial.number)
    return [t for t in kept if id(t) in below], [t for t in kept if id(t) not in below]
