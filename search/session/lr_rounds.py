"""A scaling sweep with ``[scaling] lr_grid``: its rounds of learning rates (:mod:`search.scaling.lr_grid`).

The first round (every batch size at each grid rate) is enqueued when the study is created, so the trials run
those ``{batch_size, lr}`` whatever the sampler. When a round is over, each batch size whose best rate was the
lowest or highest it tried gets a rate one step further out: those trials are enqueued and the campaign runs again
with its budget raised by as many, on the same cluster, until every best rate is bracketed or at ``[space] lr``'s
edge. A round that ends early (the time budget, a hook's stop, Ctrl-C) widens nothing; ``resume`` continues it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import optuna

from search.scaling.lr_grid import SCALING_ROUND, brackets_of, grid_plan, grid_rates, running_round, widening
from search.scaling.outcomes import goal_of
from search.spec.campaign_spec import CampaignSpec
from search.spec.scaling import LR, ScalingSpec
from search.store.warm_marks import own_trials
from spaces.params import FloatParam, SearchSpace

__all__ = ["lr_range", "enqueue_first_round", "next_round", "round_budget", "SCALING_ROUND"]


def lr_range(scaling: ScalingSpec | None, space: SearchSpace) -> tuple[float, float] | None:
    """``[space] lr``'s range when the sweep has an ``lr_grid`` (the spec check made sure it is a log float)."""
    if scaling is None or not scaling.lr_grid:
        return None
    lr = next(p for p in space.params if p.name == LR)
    assert isinstance(lr, FloatParam)
    return float(lr.low), float(lr.high)


def _enqueue(study: optuna.Study, plan: list[dict[str, Any]], round_number: int) -> None:
    for params in plan:
        study.enqueue_trial(params, user_attrs={SCALING_ROUND: round_number})


def enqueue_first_round(scaling: ScalingSpec | None, space: SearchSpace, study: optuna.Study) -> int:
    """A new sweep's grid, enqueued in the order it runs; how many trials (0: no grid)."""
    limits = lr_range(scaling, space)
    if limits is None or scaling is None:
        return 0
    plan = grid_plan(scaling.batch_sizes, grid_rates(*limits, scaling.lr_grid, scaling.lr_step))
    _enqueue(study, plan, 0)
    return len(plan)


def next_round(spec: CampaignSpec, study: optuna.Study) -> CampaignSpec | None:
    """After a finished round: the widening trials enqueued and the spec with the budget that runs them; None when
    nothing widens (every best bracketed or at the edge, no grid, or a trial unfinished)."""
    limits, goal = lr_range(spec.scaling, spec.space), goal_of(spec)
    if limits is None or goal is None or spec.scaling is None:
        return None
    trials = own_trials(study.get_trials(deepcopy=False))
    brackets = brackets_of(trials, spec.scaling, goal, *limits)
    plan = widening(brackets) if brackets else []
    if not plan:
        return None
    _enqueue(study, plan, running_round(trials) + 1)
    budget = len(trials) + len(plan)
    return dataclasses.replace(spec, study=dataclasses.replace(spec.study, n_trials=budget))


def round_budget(spec: CampaignSpec, study: optuna.Study) -> CampaignSpec:
    """The spec a (resumed) round runs with: the frozen budget is the grid's, so a round that widened it, cut short
    and resumed, gets the budget of every trial enqueued so far (its waiting ones would never be asked)."""
    if lr_range(spec.scaling, spec.space) is None:
        return spec
    enqueued = len(own_trials(study.get_trials(deepcopy=False)))
    if enqueued <= spec.study.n_trials:
        return spec
    return dataclasses.replace(spec, study=dataclasses.replace(spec.study, n_trials=enqueued))
