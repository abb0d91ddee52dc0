"""The trial model: what a trial costs, learned from the trials that ran and run.

Every prediction is an :class:`~cluster.trial_cost.estimate.Estimate` (a mean and a 90% interval) of one
:class:`~cluster.trial_cost.estimate.Quantity` for a configuration (``params``) on ``resources``. With at least
``min_fit`` points, and :data:`~cluster.trial_cost.fit.RESIDUAL_DOF` more than the coefficients, it is a log-linear
least-squares fit (``log y`` on the log of each numeric parameter, of the width, and an indicator per label), its
interval from the residual spread and the configuration's leverage. With fewer it is the nearest configurations'
values (an exact match alone): their log mean and spread, a factor of 2 for one value. With none it is unknown
(``basis`` none, all 0).
"""

from __future__ import annotations

import collections
import itertools
import statistics
from collections.abc import Hashable, Mapping
from typing import Any

from .estimate import UNKNOWN, Estimate, Quantity
from .fit import LABEL, Fit, fit_points
from .law import ONE_SLOT, WIDTH, Resources, features, labels
from .nearest import log_spread_estimate, nearest_values

__all__ = ["TrialCostModel"]


class _Points:
    """One quantity's observations, the most recent ``keep``, and its fit (refitted when they changed)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.by_key: collections.OrderedDict[Hashable, tuple[dict[str, Any], dict[str, float], float]] = (
            collections.OrderedDict()
        )
        self.fit: Fit | None = None
        self.fitted = True  # whether ``fit`` is of the current points

    def put(self, key: Hashable, params: Mapping[str, Any], resources: Resources, value: float) -> None:
        config = {**params, WIDTH: resources.width}
        feats = features(params, resources)
        feats.update({f"{name}{LABEL}{value!r}": 1.0 for name, value in labels(params).items()})
        self.by_key.pop(key, None)
        self.by_key[key] = (config, feats, float(value))
        while len(self.by_key) > self.keep:
            self.by_key.popitem(last=False)
        self.fitted = False


class TrialCostModel:
    """Duration, seconds per example and peak memory of a trial, as functions of its parameters and resources.

    ``observe_*`` feed it (a trial's ``number`` keys its observation, so a running trial's newer progress replaces
    its older); :meth:`predict` answers. ``min_fit``: the fewest points a fit is tried on; ``neighbours``: how many
    nearest configurations the fallback takes; ``keep``: the most recent observations kept per quantity.
    """

    def __init__(self, min_fit: int = 8, neighbours: int = 3, keep: int = 512) -> None:
        if min_fit < 2 or neighbours < 1 or keep < min_fit:
            raise ValueError(
                f"min_fit={min_fit!r}, neighbours={neighbours!r}, keep={keep!r}: need min_fit >= 2, "
                "neighbours >= 1 and keep >= min_fit"
            )
        self.min_fit, self.neighbours = min_fit, neighbours
        self._points = {quantity: _Points(keep) for quantity in Quantity}
        self._fresh = itertools.count()

    # --- what it learns from --------------------------------------------------------------------

    def observe_run(
        self,
        number: int | None,
        params: Mapping[str, Any],
        resources: Resources,
        seconds: float,
        *,
        full: bool,
        examples: float = 0.0,
    ) -> None:
        """A run ended after ``seconds`` (``full``: it ran to its end, not pruned, stopped or failed), having seen
        ``examples`` training examples (0: unknown). Each run counts (a retried trial's runs all cost)."""
        if seconds <= 0:
            return
        self._put(Quantity.RUN, (number, next(self._fresh)), params, resources, seconds)
        if full:
            self._put(Quantity.DURATION, (number, next(self._fresh)), params, resources, seconds)
        if examples > 0:
            self.observe_progress(number, params, resources, seconds, examples)

    def observe_progress(
        self, number: int | None, params: Mapping[str, Any], resources: Resources, seconds: float, examples: float
    ) -> None:
        """A trial has seen ``examples`` training examples in its first ``seconds`` (a running one: its latest)."""
        if seconds > 0 and examples > 0:
            key = ("trial", number) if number is not None else next(self._fresh)
            self._put(Quantity.PER_EXAMPLE, key, params, resources, seconds / examples)

    def observe_memory(
        self, number: int | None, params: Mapping[str, Any], resources: Resources, peak_bytes: int
    ) -> None:
        """A trial's peak memory (bytes)."""
        if peak_bytes > 0:
            key = ("trial", number) if number is not None else next(self._fresh)
            self._put(Quantity.MEMORY, key, params, resources, float(peak_bytes))

    def _put(self, quantity: Quantity, key: Hashable, params: Mapping[str, Any], res: Resources, v: float) -> None:
        self._points[quantity].put(key, params, res, v)

    # --- what it says ---------------------------------------------------------------------------

    def count(self, quantity: Quantity) -> int:
        return len(self._points[quantity].by_key)

    def predict(self, quantity: Quantity, params: Mapping[str, Any], resources: Resources = ONE_SLOT) -> Estimate:
        """The quantity for a configuration: the fit where there is one, else the nearest values, else unknown."""
        points = self._points[quantity]
        if not points.by_key:
            return UNKNOWN
        fit = self._fit(points)
        if fit is not None:
            feats = features(params, resources)
            feats.update({f"{name}{LABEL}{value!r}": 1.0 for name, value in labels(params).items()})
            return fit.predict(feats)
        return log_spread_estimate(self.nearest(quantity, params, resources))

    def predict_duration(
        self, params: Mapping[str, Any], resources: Resources = ONE_SLOT, examples: float = 0.0
    ) -> Estimate:
        """A full run's seconds: seconds per example times ``examples`` where both are known, else the durations
        of the runs that ended (full ones; any run while none has)."""
        if examples > 0 and self.count(Quantity.PER_EXAMPLE):
            return self.predict(Quantity.PER_EXAMPLE, params, resources).times(examples)
        quantity = Quantity.DURATION if self.count(Quantity.DURATION) else Quantity.RUN
        return self.predict(quantity, params, resources)

    def nearest(self, quantity: Quantity, params: Mapping[str, Any], resources: Resources = ONE_SLOT) -> list[float]:
        """The values of the ``neighbours`` configurations nearest this one (an exact match's alone)."""
        seen = [(config, value) for config, _feats, value in self._points[quantity].by_key.values()]
        return nearest_values({**params, WIDTH: resources.width}, seen, self.neighbours)

    def recent_median(self, quantity: Quantity, window: int = 64) -> float | None:
        """The median of the last ``window`` values, whatever their configuration (None: none yet)."""
        values = [value for _c, _f, value in self._points[quantity].by_key.values()]
        return statistics.median(values[-window:]) if values else None

    def fit(self, quantity: Quantity) -> Fit | None:
        """The quantity's current fit (None: too few points for one)."""
        return self._fit(self._points[quantity])

    def _fit(self, points: _Points) -> Fit | None:
        if not points.fitted:
            points.fit = fit_points([(feats, value) for _c, feats, value in points.by_key.values()], self.min_fit)
            points.fitted = True
        return points.fit
