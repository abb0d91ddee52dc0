"""The spec's ``[pbt]`` section: population-based training's interval, selection and exploration.

The policy that uses it is :mod:`search.pbt.policy`; how the section fits the rest of
the spec (``scheduler = "pbt"``, no pruner, one objective) is checked in
:mod:`search.spec.campaign_spec`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from optuna.distributions import BaseDistribution, FloatDistribution

from search.spec.table import SpecTable

__all__ = ["PBTSpec", "PBT_KEYS", "parse_pbt"]

PBT_KEYS = ("interval", "quantile", "perturb", "resample_probability", "hyperparams")


@dataclasses.dataclass(frozen=True)
class PBTSpec:
    interval: int
    """Epochs per segment; below `[trainer] epochs`, a multiple of `checkpoint_every`. Required."""
    quantile: float = 0.25
    """In (0, 0.5]: the bottom share exploits the top share."""
    perturb: tuple[float, ...] = (0.8, 1.25)
    """Factors applied to each explored hyperparameter."""
    resample_probability: float = 0.25
    """Chance to draw a hyperparameter afresh instead, in [0, 1]."""
    hyperparams: tuple[str, ...] = ("lr", "weight_decay")
    """Searched float parameters to explore; default: those of `lr` and `weight_decay` that are in `[space]`."""


def parse_pbt(t: SpecTable, epochs: int, checkpoint_every: int, space_dists: Mapping[str, BaseDistribution]) -> PBTSpec:
    interval = t.int("interval", minimum=1)
    if interval >= epochs:
        raise t.error("interval", f"must be below [trainer] epochs ({epochs}): a member needs at least two segments")
    if interval % checkpoint_every:
        raise t.error("interval", f"must be a multiple of [trainer] checkpoint_every ({checkpoint_every})")
    quantile = t.float("quantile", 0.25)
    if not 0.0 < quantile <= 0.5:
        raise t.error("quantile", f"must be in (0, 0.5], got {quantile:g}")
    perturb = t.data.get("perturb", [0.8, 1.25])
    if (
        not isinstance(perturb, list)
        or not perturb
        or not all(isinstance(f, (int, float)) and not isinstance(f, bool) and f > 0 for f in perturb)
    ):
        raise t.error("perturb", f"must be a non-empty list of positive factors, got {perturb!r}")
    resample = t.float("resample_probability", 0.25)
    if not 0.0 <= resample <= 1.0:
        raise t.error("resample_probability", f"must be in [0, 1], got {resample:g}")
    default = [h for h in ("lr", "weight_decay") if h in space_dists]
    names = t.data.get("hyperparams", default)
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise t.error("hyperparams", f"must be a non-empty list of [space] names, got {names!r}")
    for name in names:
        if not isinstance(space_dists.get(name), FloatDistribution):
            raise t.error("hyperparams", f"{name!r} must be a searched float parameter in [space] to be explored")
    return PBTSpec(interval, quantile, tuple(float(f) for f in perturb), resample, tuple(names))
