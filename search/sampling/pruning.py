"""Controller-side early stopping: Optuna pruners fed from streamed reports.

The rung resource is what a report's step counts, and the step of each Optuna intermediate value
(the x axis of optuna-dashboard's learning curves): epochs (default: the report's ``epoch`` metric,
else its step), examples seen (trials that report at different fractions of an epoch are compared at
equal data), or optimizer steps. ``min_resource = 0`` means "the resource of the first report", so a
rung is one report's worth of training.

:data:`PRUNER_REGISTRY` holds every built-in name a spec may give (adding one is one entry
there); a spec may also name any ``BasePruner`` class (``pruner = "pkg.mod:Class"``, built with
``[pruner]``'s other keys as keyword arguments) and ``search.run(pruner=obj)`` takes any object
(:mod:`search.sampling.components`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import optuna
from optuna.pruners import BasePruner

from search.sampling import components
from search.vocab.registry import Registry

if TYPE_CHECKING:
    from search.spec.campaign_spec import PrunerSpec

__all__ = [
    "PrunerInfo",
    "PRUNER_REGISTRY",
    "PRUNERS",
    "install_pruner",
    "make_pruner",
    "pruner_info",
    "resource_of",
    "RESOURCE_METRIC",
]

RESOURCE_METRIC = {"examples": "examples", "steps": "steps", "epochs": "epoch"}  # what a rung counts


@dataclasses.dataclass(frozen=True)
class PrunerInfo:
    """A pruner a spec may name: ``build(spec, min_resource)`` and whether it needs a rung size
    (``min_resource``; 0 in the spec: the first report's resource, so it is built at that report)."""

    name: str
    build: Callable[[PrunerSpec, int], BasePruner]
    needs_resource: bool = False
    description: str = ""
    """One line on the pruner, for the docs (the registry refuses an entry without one)."""


def _median(spec: PrunerSpec, _min_resource: int) -> BasePruner:
    return optuna.pruners.MedianPruner(n_startup_trials=spec.n_startup_trials, n_warmup_steps=spec.n_warmup_steps)


def _percentile(spec: PrunerSpec, _min_resource: int) -> BasePruner:
    return optuna.pruners.PercentilePruner(
        spec.percentile, n_startup_trials=spec.n_startup_trials, n_warmup_steps=spec.n_warmup_steps
    )


def _asha(spec: PrunerSpec, min_resource: int) -> BasePruner:
    return optuna.pruners.SuccessiveHalvingPruner(min_resource=min_resource, reduction_factor=spec.reduction_factor)


def _hyperband(spec: PrunerSpec, min_resource: int) -> BasePruner:
    return optuna.pruners.HyperbandPruner(
        min_resource=min_resource, max_resource=spec.max_resource or "auto", reduction_factor=spec.reduction_factor
    )


_BUILT_IN = (
    PrunerInfo("none", lambda spec, _r: optuna.pruners.NopPruner(), description="every trial runs to its end"),
    PrunerInfo("median", _median, description="stop a trial below the median of earlier trials at the same step"),
    PrunerInfo("percentile", _percentile, description="stop a trial outside the best [pruner] percentile"),
    PrunerInfo("asha", _asha, needs_resource=True, description="asynchronous successive halving over rungs"),
    PrunerInfo(
        "hyperband", _hyperband, needs_resource=True, description="Hyperband: several successive-halving brackets"
    ),
)
PRUNER_REGISTRY: Registry[PrunerInfo] = Registry(
    "pruner", lambda name, names: f"pruner {name!r} is not one of {', '.join(names)}, nor a 'package.module:Class'"
)
for _info in _BUILT_IN:
    PRUNER_REGISTRY.add(_info.name, _info, _info.description)
PRUNERS = tuple(PRUNER_REGISTRY)  # every built-in name a spec may give, in the order the docs list them


def pruner_info(name: str) -> PrunerInfo:
    """The registry entry of ``name`` (a ``module:Class`` entry gets one of its own); ``UnknownName`` otherwise."""
    if components.is_entry(name):
        return PrunerInfo(name, lambda spec, _r: components.build("pruner", name, spec.options))
    return PRUNER_REGISTRY.get(name)


def resource_of(step: int, metrics: Mapping[str, float], resource: str) -> int:
    """The pruning step of a report: the metric named by ``resource``, else the report step."""
    value = metrics.get(RESOURCE_METRIC[resource])
    return int(value) if value is not None else int(step)


def make_pruner(name: str, spec: PrunerSpec, first_resource: int | None = None) -> BasePruner | None:
    """The pruner ``name``; ``None`` while it needs ``first_resource`` and none is known yet."""
    info = pruner_info(name)
    min_resource = spec.min_resource if spec.min_resource > 0 else first_resource
    if info.needs_resource and min_resource is None:
        return None
    return info.build(spec, int(min_resource or 0))


def install_pruner(study: optuna.Study, name: str, spec: PrunerSpec, first_resource: int | None = None) -> bool:
    """Give ``study`` the pruner ``name`` (the one place a study's pruner is built), whoever created the study
    (Optuna's default is a MedianPruner); one that needs a rung size (asha, hyperband without ``min_resource``)
    and has no ``first_resource`` yet gets a ``NopPruner``, which prunes nothing. Whether ``name``'s is in place."""
    pruner = make_pruner(name, spec, first_resource)
    study.pruner = pruner or optuna.pruners.NopPruner()
    return pruner is not None
