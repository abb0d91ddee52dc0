"""Seeds: every trial's seed derives from the study seed and the trial number."""

from __future__ import annotations

import numpy as np

__all__ = ["trial_seed", "component_seed"]


def trial_seed(study_seed: int, number: int) -> int:
    """A 32-bit seed for trial ``number``; independent of timing, workers and order."""
    return int(np.random.SeedSequence([int(study_seed), int(number)]).generate_state(1, dtype=np.uint32)[0])


def component_seed(study_seed: int, component: str) -> int:
    """A 32-bit seed for a named component of the controller (sampler, pruner bootstrap...)."""
    salt = [ord(c) for c in component]
    return int(np.random.SeedSequence([int(study_seed), *salt]).generate_state(1, dtype=np.uint32)[0])
