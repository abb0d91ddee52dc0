"""``[trainer] objective = true``: a campaign whose entry is an Optuna objective, ``objective(trial)``.

Such an objective suggests its own parameters while it runs (define-by-run), so the spec declares none: ``[space]``
is absent or empty. Each suggestion is answered by the controller's sampler at the moment the trial asks, which is
why the sampler runs on the controller's loop (``sampling = "inline"``) and why a ``deterministic`` campaign (trial
k sampled from trials 0..k-P-1 only) cannot hold it. ``[pbt]`` and ``[scaling]`` set the parameters of trials
themselves, and a data-parallel trial runs its trainer once per rank: none of them fits an objective.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from search.spec.table import SpecError
from spaces.params import SearchSpace

if TYPE_CHECKING:
    from search.spec.campaign_spec import StudySpec, TrainerSpec

__all__ = ["objective_space", "objective_study"]

_NOT_WITH = {
    "pbt": "population-based training sets each member's parameters itself",
    "scaling": "a scaling sweep sets each trial's batch size itself",
}


def objective_space(source: str, data: Any) -> SearchSpace:
    """The empty space of an objective campaign; a declared parameter is refused (the objective suggests them)."""
    if data is None or (isinstance(data, Mapping) and not data):
        return SearchSpace(())
    raise SpecError(
        source,
        "space",
        "must be empty with [trainer] objective = true: the objective suggests its own parameters (trial.suggest_*)",
    )


def objective_study(source: str, data: Mapping[str, Any], study: StudySpec, trainer: TrainerSpec) -> StudySpec:
    """``study`` checked for an objective, its sampler on the controller's loop (``sampling = "inline"``)."""
    for section, why in _NOT_WITH.items():
        if section in data:
            raise SpecError(source, section, f"not with [trainer] objective = true: {why}")
    if study.deterministic:
        raise SpecError(
            source,
            "study.deterministic",
            "not with [trainer] objective = true: an objective's suggestions are sampled while it runs, from the "
            "trials finished by then",
        )
    if trainer.data_parallel != 1:
        raise SpecError(source, "trainer.data_parallel", "must be 1 with [trainer] objective = true")
    if study.sampling not in ("auto", "inline"):
        raise SpecError(
            source,
            "study.sampling",
            f'must be "inline" (or "auto") with [trainer] objective = true, got {study.sampling!r}: each '
            "suggestion is sampled on the controller's loop",
        )
    return dataclasses.replace(study, sampling="inline")
