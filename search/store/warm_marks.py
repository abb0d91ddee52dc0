"""How a warm-start copy is marked (user attributes), and the readers that leave such copies out.

:mod:`search.session.warm_start` copies another study's finished trials into a new one; everything
that counts, tabulates or reports the campaign's own trials reads them through :func:`own_trials`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import optuna
from optuna.trial import FrozenTrial

__all__ = ["WARM_START", "WARM_START_TRIAL", "is_warm_start", "own_trials", "describe"]

WARM_START = "warm_start"  # user attribute of a copied trial (its source) and of the study (what was used)
WARM_START_TRIAL = "warm_start_trial"  # user attribute of a copied trial: its number in the source


def is_warm_start(trial: FrozenTrial) -> bool:
    """Whether ``trial`` was copied from a warm-start source (not one of this campaign's trials)."""
    return WARM_START in trial.user_attrs


def own_trials(trials: Iterable[FrozenTrial]) -> list[FrozenTrial]:
    """The campaign's own trials: ``trials`` without the warm-start copies."""
    return [t for t in trials if not is_warm_start(t)]


def describe(study: optuna.Study) -> dict[str, Any] | None:
    """What the study's warm start used (``WarmStart`` as a dict), if it had one."""
    value = study.user_attrs.get(WARM_START)
    return value if isinstance(value, dict) else None
