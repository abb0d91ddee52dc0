"""A new trial created with its parameters in one storage entry, when the sampler can name them first.

``Study.ask(fixed_distributions=...)`` creates the trial (one journal entry), then suggests each parameter
through Optuna's trial machinery: a compatibility check, a copy of the trial and one more journal entry per
parameter, 107 µs for the six categoricals of a NAS-Bench-201 cell on the campaign's journal. Two of the
campaign's samplers know every fixed parameter before the trial exists:

- the built-in ``random`` (:class:`~search.sampling.random_draws.RandomDraws`), whose draws depend on
  nothing but its own stream;
- the controller's :class:`~search.sampling.process.ReplaySampler`, which replays what the sampler child
  asked (``tpe`` and ``gp`` on a real cluster).

For those, :func:`ask_fixed` creates the trial from a template that holds its parameters, as ``Study.add_trial``
does, and then the :class:`optuna.Trial` for it: 74 µs (bench/NOTES.md, session 21). The trial is the one
``Study.ask`` would make: the same parameters in the same order, drawn from the same stream (a single-valued
distribution takes its value without a draw, as Optuna's ``_suggest`` does), the same number; parameters
suggested afterwards (a space's conditional ones) go through Optuna as before. A study with an enqueued
(WAITING) trial is asked as Optuna asks it, so the enqueued parameters win.
"""

from __future__ import annotations

import datetime
from abc import ABC, abstractmethod
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from search.compat import optuna_private as op

__all__ = ["Presampler", "ask_fixed"]


class Presampler(ABC):
    """A sampler that can name the next trial's fixed parameters before the trial exists."""

    @abstractmethod
    def presample(self, distributions: dict[str, BaseDistribution]) -> dict[str, Any] | None:
        """Every parameter of ``distributions``, in their order, as ``Study.ask`` would suggest them for the next
        trial; None to let ``Study.ask`` ask (nothing drawn, nothing consumed)."""


def ask_fixed(study: optuna.Study, distributions: dict[str, BaseDistribution]) -> optuna.Trial:
    """``study.ask(fixed_distributions=distributions)``, in one storage entry where the sampler presamples."""
    sampler = study.sampler
    if not isinstance(sampler, Presampler) or not op.uses("study") or _waiting(study):
        return study.ask(fixed_distributions=distributions)
    params = sampler.presample(distributions)
    if params is None:
        return study.ask(fixed_distributions=distributions)
    template = FrozenTrial(
        number=-1,
        state=TrialState.RUNNING,
        value=None,
        datetime_start=datetime.datetime.now(),
        datetime_complete=None,
        params=params,
        distributions=dict(distributions),
        user_attrs={},
        system_attrs={},
        intermediate_values={},
        trial_id=-1,
    )
    op.forget_cached_trials(study)  # as Study.ask starts
    trial_id = op.storage_of(study).create_new_trial(op.study_id(study), template_trial=template)
    return optuna.Trial(study, trial_id)  # the sampler's before_trial sees it, as in Study.ask


def _waiting(study: optuna.Study) -> bool:
    """Whether an enqueued trial waits (the campaign's journal answers from a flag)."""
    return bool(op.storage_of(study).get_all_trials(op.study_id(study), deepcopy=False, states=(TrialState.WAITING,)))
