"""The campaign's sampler, built from the spec: what the session gives a new or resumed study and what the
supply builds again when a sampler child died.

No trial is sampled twice from one random stream. Trials are asked ahead of need, so a
saved sampler state is always behind what reached the storage: restoring it would replay
parameter sets already run. Instead every sampler the campaign builds gets its own seed,
:func:`sampler_seed` of the study seed, the number of trials in the storage when it is
built, and how many samplers this controller built before (:func:`campaign_sampler`). A
sampler whose trials reached the storage leaves that number higher for any sampler built
after it, so two samplers that both put trials in the storage never share a seed: after
``resume``, after a sampler child that died and was replaced, after both. Besides their
random generator, the registry's samplers keep nothing outside the storage that sampling
needs (TPE, CMA-ES, QMC, NSGA-II, grid and evolution read the trials; GP's kernel cache
only speeds it up), so a new sampler loses nothing else.
"""

from __future__ import annotations

import optuna

from search.sampling.samplers import make_sampler
from search.sampling.seeds import component_seed
from search.spec.campaign_spec import CampaignSpec

__all__ = ["campaign_sampler", "sampler_seed"]


def sampler_seed(study_seed: int, trials: int, restart: int = 0) -> int:
    """The seed of a sampler built with ``trials`` trials in the storage, after ``restart`` others in this
    controller; a new campaign's first sampler (0, 0) gets the study seed itself."""
    if trials == 0 and restart == 0:
        return int(study_seed)
    return component_seed(study_seed, f"sampler-{int(trials)}-{int(restart)}")


def campaign_sampler(spec: CampaignSpec, trials: int = 0, restart: int = 0) -> optuna.samplers.BaseSampler:
    """The spec's sampler, seeded with :func:`sampler_seed` (a scaling sweep's: one per batch size)."""
    seed = sampler_seed(spec.study.seed, trials, restart)
    if spec.scaling is None:
        return make_sampler(spec.study.sampler, spec.space, seed, spec.sampler_options, budget=spec.study.n_trials)
    from search.scaling.sweep import scaling_sampler  # lazily: scipy and pandas for a scaling sweep only

    return scaling_sampler(
        spec.scaling.batch_sizes, seed, lambda s: make_sampler(spec.study.sampler, spec.space, s, spec.sampler_options)
    )
