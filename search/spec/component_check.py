"""Build a spec's sampler and pruner classes once, so a wrong class or keyword is one line at load, not at the first ask."""

from __future__ import annotations

from typing import TYPE_CHECKING

from search.sampling import components
from search.sampling.samplers import make_sampler
from search.spec.table import SpecError

if TYPE_CHECKING:
    from search.spec.campaign_spec import CampaignSpec

__all__ = ["check_components"]


def check_components(spec: CampaignSpec) -> None:
    """Build the sampler and a pruner class once, so a wrong class or keyword is one line now, not at the first ask."""
    from search.sampling.pruning import make_pruner

    study = spec.study
    try:
        if not components.registered("sampler", study.sampler) and (
            spec.sampler_options or components.is_entry(study.sampler)
        ):
            make_sampler(study.sampler, spec.space, study.seed, spec.sampler_options)
    except ValueError as exc:
        raise SpecError(spec.source, "sampler" if spec.sampler_options else "study.sampler", str(exc)) from None
    try:
        if components.is_entry(study.pruner) and not components.registered("pruner", study.pruner):
            make_pruner(study.pruner, spec.pruning)
    except ValueError as exc:
        raise SpecError(spec.source, "study.pruner", str(exc)) from None
