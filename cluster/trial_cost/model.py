"""The trial model: what a trial costs, learned from the trials that ran and run.

Every prediction is an :class:`~cluster.trial_cost.estimate.Estimate` (a mean and a 90% interval) of one
:class:`~cluster.trial_cost.estimate.Quantity` for a configuration (``params``) on ``resources``. With at least
``min_fit`` points, and :data:`~cluster.trial_cost.fit.RESIDUAL_DOF` more than the coefficients, it is a log-linear
least-squares fit (``log y`` on the log of each numeric parameter, of the width, and an indicator per label), its
interval from the residual spread and the configuration's leverage. With fewer it is the nearest configurations'
values (an exact match alone): their log mean and spread, a factor of 2 for one value. With none it is unknown
(``basis`` none, all 0).

A running trial's seconds so far are a lower bound on its run (:meth:`TrialCostModel.observe_running`): the fit
of the durations takes them as censored points (:func:`~cluster.trial_cost.fit.fit_points`), so it is not the fit
of the short runs that end first; the nearest values, with too few points for a fit, leave them out.
"""

from __future__ import annotations

import collections
import itertools
import math
import statistics
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

from .estimate import UNKNOWN, Estimate, Quantity
from .fit import LABEL, Fit, fit_points
from .law import ONE_SLOT, WIDTH, Resources, features, labels
from .nearest import log_spread_estimate, nearest_values

__all__ = ["TrialCostModel"]


CENSORED = (Quantity.DURATION, Quantity.RUN)  # the quantities a running trial bounds from below
RECENT = 64  # the most recent values :meth:`TrialCostModel.recent_median` and the nearest configurations look at


def config_features(params: Mapping[str, Any], resources: Resources) -> dict[str, float]:
    """What the fit reads of a configuration: its numeric features and an indicator per label."""
    feats = features(params, resources)
    feats.update({f"{name}{LABEL}{value!r}": 1.0 for name, value in labels(params).items()})
    return feats


class _Points:
    """One quantity's observations, the most recent ``keep``, and its fit (refitted once 5% of them are new)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.by_key: collections.OrderedDict[Hashable, tuple[dict[str, Any], dict[str, float], float]] = (
            collections.OrderedDict()
        )
        self.fit: Fit | None = None
        self.changes = 0  # observations since the last fit
        self.censored: dict[Hashable, tuple[dict[str, float], float]] = {}  # running: features, seconds so far
        self.recent: collections.deque[float] = collections.deque(maxlen=RECENT)
        self.median: float | None = None  # of ``recent``, once worked out

    def put(self, key: Hashable, params: Mapping[str, Any], resources: Resources, value: float) -> None:
        config = {**params, WIDTH: resources.width}
        feats = config_features(params, resources)
        self.by_key.pop(key, None)
        self.by_key[key] = (config, feats, float(value))
        while len(self.by_key) > self.keep:
            self.by_key.popitem(last=False)
        self.recent.append(float(value))
        self.changes += 1
        self.median = None  # of ``recent``, worked out when next asked

    def censor(self, key: Hashable, params: Mapping[str, Any], resources: Resources, bound: float) -> None:
        """A lower bound on a running trial's value (a change for the fit once new or a quarter longer)."""
        before = self.censored.get(key)
        if before is None or bound >= 1.25 * before[1]:
            self.changes += 1
            self.censored[key] = (config_features(params, resources), float(bound))

    def uncensor(self, key: Hashable) -> None:
        if self.censored.pop(key, None) is not None:
            self.changes += 1

    def stale(self) -> bool:
        """Whether to fit again: no fit yet and something new, or 5% of the points new since the fit."""
        if self.fit is None:
            return self.changes > 0
        return self.changes >= max(1, len(self.by_key) // 20)


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
        for quantity in CENSORED:
            self._points[quantity].uncensor(("running", number))
        self._put(Quantity.RUN, (number, next(self._fresh)), params, resources, seconds)
        if full:
            self._put(Quantity.DURATION, (number, next(self._fresh)), params, resources, seconds)
        if examples > 0:
            self.observe_progress(number, params, resources, seconds, examples)

    def observe_running(self, number: int, params: Mapping[str, Any], resources: Resources, seconds: float) -> None:
        """Trial ``number`` has run ``seconds`` and goes on: a lower bound on its run, until :meth:`observe_run`."""
        if seconds > 0 and math.isfinite(seconds):
            for quantity in CENSORED:
                self._points[quantity].censor(("running", number), params, resources, seconds)

    def forget_running(self, keep: Iterable[int]) -> None:
        """Only the trials ``keep`` run on (the others' runs ended, were lost or given back untold)."""
        kept = {("running", number) for number in keep}
        for quantity in CENSORED:
            for key in [k for k in self._points[quantity].censored if k not in kept]:
                self._points[quantity].uncensor(key)

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
            return fit.predict(config_features(params, resources))
        return log_spread_estimate(self.nearest(quantity, params, resources))

    def predict_many(
        self, quantity: Quantity, configs: Sequence[tuple[Mapping[str, Any], Resources]]
    ) -> list[Estimate]:
        """:meth:`predict` for each ``(params, resources)``, the fit's in one matrix product."""
        points = self._points[quantity]
        fit = self._fit(points) if points.by_key else None
        if fit is None:
            return [self.predict(quantity, params, resources) for params, resources in configs]
        return fit.predict_many([config_features(params, resources) for params, resources in configs])

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
        """The values of the ``neighbours`` configurations nearest this one (an exact match's alone), among the
        :data:`RECENT` most recent."""
        recent = itertools.islice(reversed(self._points[quantity].by_key.values()), RECENT)
        seen = [(config, value) for config, _feats, value in recent][::-1]
        return nearest_values({**params, WIDTH: resources.width}, seen, self.neighbours)

    def recent_median(self, quantity: Quantity, window: int = RECENT) -> float | None:
        """The median of the last ``window`` values (at most :data:`RECENT`), whatever their configuration (None:
        none yet)."""
        points = self._points[quantity]
        if window < RECENT:
            values = list(points.recent)[-window:]
            return statistics.median(values) if values else None
        if points.median is None and points.recent:
            points.median = statistics.median(points.recent)
        return points.median

    def fit(self, quantity: Quantity) -> Fit | None:
        """The quantity's current fit (None: too few points for one)."""
        return self._fit(self._points[quantity])

    def _fit(self, points: _Points) -> Fit | None:
        if points.stale():
            exact = [(feats, value) for _c, feats, value in points.by_key.values()]
            points.fit = fit_points(exact, self.min_fit, list(points.censored.values()))
            points.changes = 0
        return points.fit
