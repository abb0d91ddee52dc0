"""Controller-side early stopping: Optuna pruners fed from streamed reports.

The rung resource is what a report's step counts: examples seen (default, so
trials with different batch sizes are compared at equal data), optimizer steps,
or epochs. ``min_resource = 0`` means "the resource of the first report", so a
rung is one epoch's worth of data whatever the batch size.
"""

from __future__ import annotations

from collections.abc import Mapping

import optuna
from optuna.pruners import BasePruner

from search.spec.campaign_spec import RESOURCE_METRIC, PrunerSpec

__all__ = ["make_pruner", "resource_of", "RESOURCE_METRIC"]



def resource_of(step: int, metrics: Mapping[str, float], resource: str) -> int:
    """The pruning step of a report: the metric named by ``resource``, else the report step."""
    value = metrics.get(RESOURCE_METRIC[resource])
    return int(value) if value is not None else int(step)


def make_pruner(name: str, spec: PrunerSpec, first_resource: int | None = None) -> BasePruner | None:
    """The pruner ``name``; ``None`` while it needs ``first_resource`` and none is known yet."""
    min_resource = spec.min_resource if spec.min_resource > 0 else first_resource
    if name == "none":
        return optuna.pruners.NopPruner()
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=spec.n_startup_trials, n_warmup_steps=spec.n_warmup_steps)
    if name == "percentile":
        return optuna.pruners.PercentilePruner(
            spec.percentile, n_startup_trials=spec.n_startup_trials, n_warmup_steps=spec.n_warmup_steps
        )
    if min_resource is None:
        return None
    if name == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=min_resource, reduction_factor=spec.reduction_factor
        )
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=min_resource,
            max_resource=spec.max_resource or "auto",
            reduction_factor=spec.reduction_factor,
        )
    raise ValueError(f"pruner {name!r} is not one of none, median, percentile, asha, hyperband")
