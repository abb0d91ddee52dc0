"""The built-in ``random`` sampler: Optuna's :class:`~optuna.samplers.RandomSampler`, the same draws, asked faster.

Optuna's sampler builds a search-space transform for every parameter of every ask (about 2 µs), then draws
with ``RandomState.uniform`` over that transform's bounds. Here:

- each distribution's transform is built once and kept, per distribution object (a campaign asks with the same
  objects every time; keyed by value, the six equal distributions of a NAS-Bench-201 cell would share one hash
  and pay Optuna's choice-by-choice ``__eq__`` at five lookups of six);
- a categorical parameter of ``n`` choices draws ``random_sample(n)`` and takes the index of the largest
  draw. Optuna draws ``uniform(zeros(n), ones(n))``: each value is ``0 + 1 * u`` for the same next double
  ``u`` of the same legacy ``RandomState`` stream (NumPy keeps that stream fixed), so the values, the choice
  and the state the next draw starts from are the same. The test compares the two draw for draw.

So a campaign asks the same parameters as with Optuna's sampler and the same seed, in about half the time
per parameter.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.study import Study
from optuna.trial import FrozenTrial

from search.compat import optuna_private as op
from search.sampling.presample import Presampler

__all__ = ["RandomDraws"]

_KEY = "x"  # the one parameter of a kept transform
_MAX_KEPT = 4096  # dependent ranges make a distribution per value: keep the cache small


class RandomDraws(optuna.samplers.RandomSampler, Presampler):
    """Optuna's ``RandomSampler`` (same seed, same draws), with each distribution's transform kept; it names a
    trial's fixed parameters before the trial exists (:mod:`search.sampling.presample`)."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(seed=seed)
        self._kept: dict[int, tuple[BaseDistribution, Any]] = {}  # id -> the object (so its id is not reused), kept

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_kept"] = {}  # rebuilt on demand: a pickled sampler (a child's, a saved state) stays small
        return state

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        return self._draw(param_distribution)

    def presample(self, distributions: dict[str, BaseDistribution]) -> dict[str, Any]:
        """The draws ``Study.ask`` would make, in order: a single-valued distribution takes its value undrawn."""
        return {name: op.single_value(d) if d.single() else self._draw(d) for name, d in distributions.items()}

    def _draw(self, param_distribution: BaseDistribution) -> Any:
        entry = self._kept.get(id(param_distribution))
        kept = entry[1] if entry is not None and entry[0] is param_distribution else self._keep(param_distribution)
        rng = self._rng.rng
        if isinstance(kept, tuple):  # categorical: the choices and their count
            choices, n = kept
            return choices[int(np.argmax(rng.random_sample(n)))]
        low, high = kept.bounds[:, 0], kept.bounds[:, 1]
        return kept.untransform(rng.uniform(low, high))[_KEY]

    def _keep(self, distribution: BaseDistribution) -> Any:
        if len(self._kept) >= _MAX_KEPT:
            self._kept.clear()
        kept: Any
        if isinstance(distribution, CategoricalDistribution):
            kept = (distribution.choices, len(distribution.choices))
        else:
            kept = op.SearchSpaceTransform({_KEY: distribution})
        self._kept[id(distribution)] = (distribution, kept)
        return kept
