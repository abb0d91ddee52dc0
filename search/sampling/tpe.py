"""TPE whose Parzen estimators serve several asks while the study grows by less than a fraction of itself.

Optuna's :class:`~optuna.samplers.TPESampler` rebuilds both Parzen estimators (the
"below" and "above" groups of every finished and, with the constant liar, running
trial) at every ask: a Python walk over the whole study, about 0.1 s per ask at
50,000 trials, while 10,000 workers of 60 s trials need an ask every 6 ms.
:class:`RefitTPESampler` keeps the estimators it built for a search space and draws
each ask's candidates from them, with the sampler's own random stream, until the
study's trial count has grown by more than ``refit_fraction`` of what it was at the
fit (default 0.5%: a refit every ask below 200 trials, every 250 asks at 50,000).
The asks in between see the same model, not each other's lies; with thousands of
trials already running (each lied about), a few hundred more change the above group
by under a percent.

What else an ask would walk or score again is kept too:

- each trial's state, ranking key and internal values, in a table that a refit updates from the trials that are new
  or were running (:mod:`search.sampling.tpe_table`; the split is then a sort of arrays). A study of several
  objectives is walked as Optuna walks it, each trial's internal values kept once its parameters are set;
- the intersection search space, each finished trial folded in once;
- the startup's "not enough finished trials yet", for the rest of the ask and until the study grows by the fraction;
  its random draws are :class:`~search.sampling.random_draws.RandomDraws`' (Optuna's draws with the same seed, a
  quarter of the time: a first wave of 10,000 asks on 10,000 workers is all startup);
- in a space of categorical parameters only (up to ``GRID_CELLS`` points), log l(x) - log g(x) at every point, built
  once per shared fit: an ask is then a draw of candidates and a look-up, where Optuna scores each candidate
  against one kernel per trial. The candidates come from l(x) tabulated too (a search in its running sum), the
  same distribution as Optuna's kernel-by-kernel draw but not the same random stream: 15 instead of 180 µs an ask;
- in any other space, each continuous kernel's truncation mass and log scale, once per shared fit
  (:mod:`search.sampling.tpe_density`): Optuna computes them for every kernel at every ask.

Below ``1 / refit_fraction`` trials every ask refits, so a campaign of up to 200 trials
samples exactly what Optuna's TPE samples with the same seed (tested). The fits are a
cache: they are left out when the sampler is pickled (to a child process, or with the
campaign's sampler state), and a sampler asked by another study refits.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, cast

import numpy as np
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.samplers import TPESampler
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState

from search.compat import optuna_private as op
from search.sampling.random_draws import RandomDraws
from search.sampling.tpe_density import FittedLogPdf
from search.sampling.tpe_split import split_for_refit
from search.sampling.tpe_table import TrialChanges, TrialTable

__all__ = ["RefitTPESampler", "REFIT_FRACTION"]

REFIT_FRACTION = 0.005
GRID_CELLS = 1 << 18  # an all-categorical space this small gets its acquisition tabulated once per fit


@dataclasses.dataclass(frozen=True)
class _Fit:
    """Both estimators of one search space, built when the study had ``trials`` trials."""

    study: tuple[int, int]
    trials: int
    below: op.ParzenEstimator
    above: op.ParzenEstimator
    discrete: bool  # every parameter discrete: candidates repeat, so their acquisition values are kept
    acquisition: dict[tuple[float, ...], float] = dataclasses.field(default_factory=dict)
    grid: np.ndarray | None = None  # log l(x) - log g(x) at every point of an all-categorical space
    cumulative: np.ndarray | None = None  # with a grid: l(x) summed over the grid's points in order, to draw from
    density: tuple[FittedLogPdf, FittedLogPdf] | None = None  # log l and log g with the kernels' constants kept


def _space_key(search_space: dict[str, BaseDistribution]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((name, repr(dist)) for name, dist in search_space.items()))


def _study_key(study: Study) -> tuple[int, int]:
    return (id(op.storage_of(study)), op.study_id(study))


class RefitTPESampler(TPESampler):
    """:class:`~optuna.samplers.TPESampler` (every keyword argument of it) that refits its estimators only once
    the study has grown by ``refit_fraction`` (0 <= refit_fraction < 1; 0: every ask, as Optuna does)."""

    def __init__(self, *, refit_fraction: float = REFIT_FRACTION, **kwargs: Any) -> None:
        if not (isinstance(refit_fraction, (int, float)) and 0 <= refit_fraction < 1):
            raise ValueError(f"refit_fraction must be a number in [0, 1), got {refit_fraction!r}")
        super().__init__(**kwargs)
        self._random_sampler = RandomDraws(seed=kwargs.get("seed"))  # Optuna's startup draws, asked faster
        self._refit_fraction = float(refit_fraction)
        self._fits: dict[tuple[tuple[str, str], ...], _Fit] = {}
        self._space: tuple[tuple[int, int], int, dict[str, BaseDistribution]] | None = None
        self._startup: dict[tuple[int, int], tuple[int, bool]] = {}  # study -> (trial asked, startup done)
        self._intersection: _Intersection | None = None
        self._rows: dict[tuple[tuple[int, int], tuple[tuple[str, str], ...]], dict[int, tuple[Any, ...]]] = {}
        self._scores: dict[tuple[int, int], dict[int, float]] = {}  # per study: finished trials' infeasibility
        self._tables: dict[tuple[tuple[int, int], tuple[tuple[str, str], ...]], TrialTable | None] = {}
        self.refits = 0  # estimator pairs built: how often the cache missed

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_fits={}, _space=None, _rows={}, _startup={}, _intersection=None, _scores={}, _tables={})
        return state

    def _stale(self, trial: FrozenTrial, trials_then: int) -> bool:
        return trial.number - trials_then > math.floor(self._refit_fraction * trials_then)

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        """Optuna's intersection of the finished trials' spaces (a walk from the oldest running trial on), kept
        as long as a fit is."""
        if self._space is not None and self._space[0] == _study_key(study) and not self._stale(trial, self._space[1]):
            return dict(self._space[2])
        if self._group or not self._is_multivariate(study):
            space = super().infer_relative_search_space(study, trial)
        else:
            if self._intersection is None or self._intersection.study != _study_key(study):
                self._intersection = _Intersection(_study_key(study))
            space = self._intersection.update(study)
        self._space = (_study_key(study), trial.number, space)
        return dict(space)

    def _startup_done(self, study: Study, trial: FrozenTrial) -> bool:
        """Optuna's test for enough finished trials to model (a walk over the study), kept for the rest of the ask;
        a no is kept until the study grows by the fraction, a yes for ever (finished trials only accumulate)."""
        key = _study_key(study)
        known = self._startup.get(key)
        if known is not None and (known[1] or not self._stale(trial, known[0])):
            return known[1]
        finished = op.get_trials(study, deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED), use_cache=True)
        done = len(finished) >= self._n_startup_trials
        self._startup[key] = (trial.number, done)
        return done

    def _fit_of(self, study: Study, search_space: dict[str, BaseDistribution]) -> _Fit | None:
        """The last fit of this space on this study, fresh or not. One exists only once the startup trials are
        done (finished trials only accumulate), so Optuna's count of them, a walk over the study, can be skipped."""
        fit = self._fits.get(_space_key(search_space))
        return fit if fit is not None and fit.study == _study_key(study) else None

    def _sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if search_space and self._startup_done(study, trial):  # "done" is kept: no walk once a fit exists
            return self._sample(study, trial, search_space)
        return {}

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        space = {param_name: param_distribution}
        if self._fit_of(study, space) is not None:
            return self._sample(study, trial, space)[param_name]
        if not self._startup_done(study, trial):  # the startup's random draw, without a walk per parameter
            return self._random_sampler.sample_independent(study, trial, param_name, param_distribution)
        return super().sample_independent(study, trial, param_name, param_distribution)

    def _sample(self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        """Optuna's draw of 24 candidates from "below" and pick of the best, from the last fit while it is fresh for
        ``trial`` (whose number counts the study's trials)."""
        fit = self._fit_of(study, search_space)
        if fit is None or self._stale(trial, fit.trials):
            fit = self._refit(study, trial, search_space)
        if fit.grid is not None and fit.cumulative is not None:
            return self._draw_from_grid(fit, search_space)
        samples_below = fit.below.sample(self._rng.rng, self._n_ei_candidates)
        acq_func_vals = self._acquisition(fit, samples_below)
        ret = self._compare(samples_below, acq_func_vals)
        return {name: dist.to_external_repr(ret[name]) for name, dist in search_space.items()}

    def _draw_from_grid(self, fit: _Fit, search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        """Optuna's draw and pick on a tabulated space: the candidates are points drawn from l(x) (the below
        mixture's density, which Optuna samples kernel by kernel, so the draws are alike in distribution but not in
        the random stream), the pick is the first of the best acquisition values."""
        grid = cast(np.ndarray, fit.grid)
        points = _draw_points(cast(np.ndarray, fit.cumulative), self._rng.rng, self._n_ei_candidates)
        best = points[np.argmax(grid.reshape(-1)[points])]
        index = np.unravel_index(int(best), grid.shape)
        return {name: dist.to_external_repr(int(i)) for (name, dist), i in zip(search_space.items(), index)}

    def _acquisition(self, fit: _Fit, samples: dict[str, np.ndarray]) -> np.ndarray:
        """Optuna's log l(x) - log g(x) of each candidate; in a discrete space, computed once per point and fit
        (g holds a kernel per trial: 24 candidates against 20,000 kernels cost 45 ms an ask)."""
        if fit.grid is not None:
            return fit.grid[tuple(samples[name].astype(np.intp) for name in op.space_of(fit.below))]
        if not fit.discrete:
            return self._log_ratio(fit, samples)
        names = list(samples)
        points = list(zip(*(samples[name].tolist() for name in names)))
        new = sorted({p for p in points if p not in fit.acquisition})
        if new:
            columns = {name: np.asarray([p[i] for p in new], dtype=samples[name].dtype) for i, name in enumerate(names)}
            values = self._log_ratio(fit, columns)
            fit.acquisition.update(zip(new, values.tolist()))
        return np.asarray([fit.acquisition[p] for p in points])

    def _log_ratio(self, fit: _Fit, samples: dict[str, np.ndarray]) -> np.ndarray:
        """log l(x) - log g(x): Optuna's, from the fit's kept constants where the fit serves several asks."""
        if fit.density is None:
            return self._compute_acquisition_func(samples, fit.below, fit.above)
        below, above = fit.density
        return below(samples) - above(samples)

    def _get_internal_repr(
        self, trials: list[FrozenTrial], search_space: dict[str, BaseDistribution], study: Study
    ) -> dict[str, np.ndarray]:
        """Optuna's columns of the trials' internal values, each trial's row kept once its parameters are set (they
        never change; a running trial's proposal, which a fixed parameter may override, is not kept): a refit
        converts only the trials that are new since the last."""
        if self._refit_fraction == 0:
            return super()._get_internal_repr(trials, search_space, study)
        kept = self._rows.setdefault((_study_key(study), _space_key(search_space)), {})
        rows = []
        for trial in trials:
            row = kept.get(trial.number)
            if row is None:
                params = self._get_params(trial, study)
                if not search_space.keys() <= params.keys():
                    continue
                row = tuple(d.to_internal_repr(params[n]) for n, d in search_space.items())
                if trial.state.is_finished() or search_space.keys() <= trial.params.keys():
                    kept[trial.number] = row  # not a running trial's proposal before its parameters are set
            rows.append(row)
        table = np.asarray(rows, dtype=float).reshape(len(rows), len(search_space))
        return {name: table[:, i] for i, name in enumerate(search_space)}

    def _observations(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None:
        """The below and above groups' observations from the space's kept :class:`TrialTable`, updated with what
        changed; None where it cannot serve (every ask refits, several objectives, or trials it cannot follow)."""
        if self._refit_fraction == 0 or len(study.directions) != 1:
            return None
        key = (_study_key(study), _space_key(search_space))
        if key not in self._tables:
            maximize = study.direction == StudyDirection.MAXIMIZE
            self._tables[key] = TrialTable(search_space, maximize, lambda t: self._get_params(t, study))
        table = self._tables[key]
        if table is None:
            return None
        if not table.update(op.get_trials(study, deepcopy=False, use_cache=not self._constant_liar)):
            self._tables[key] = None  # for good: the walk serves this study
            return None
        asking = trial.number if self._constant_liar else -1
        return table.split(asking, self._constant_liar, cast(Callable[[int], int], self._gamma))

    def _refit(self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]) -> _Fit:
        """Optuna's :meth:`TPESampler._sample` up to its draw: both estimators from the study's trials now."""
        if self._gamma is None:
            self._gamma = _gamma_of(study)
        observed = self._observations(study, trial, search_space)
        if observed is not None:
            parameters = self._parzen_estimator_parameters
            below = self._parzen_estimator_cls(observed[0], search_space, parameters)
            above = self._parzen_estimator_cls(observed[1], search_space, parameters)
        else:
            states = [TrialState.COMPLETE, TrialState.PRUNED]
            if self._constant_liar:
                states.append(TrialState.RUNNING)
            trials = op.get_trials(study, deepcopy=False, states=states, use_cache=not self._constant_liar)
            # the liar leaves the asking trial out; running trials are left out of gamma (Optuna 4073)
            scores = self._scores.setdefault(_study_key(study), {})
            asking = trial.number if self._constant_liar else -1
            below_trials, above_trials = split_for_refit(study, trials, asking, self._gamma, scores)
            below = self._build_parzen_estimator(study, search_space, below_trials, handle_below=True)
            above = self._build_parzen_estimator(study, search_space, above_trials, handle_below=False)
        discrete = all(isinstance(d, (CategoricalDistribution, IntDistribution)) for d in search_space.values())
        shared = math.floor(self._refit_fraction * trial.number) >= 1  # the fit serves more than this ask
        tabulated = _acquisition_grid(below, above) if shared else None
        grid, cumulative = tabulated if tabulated is not None else (None, None)
        density = (FittedLogPdf(below), FittedLogPdf(above)) if shared and grid is None else None
        fit = _Fit(
            _study_key(study), trial.number, below, above, discrete, grid=grid, cumulative=cumulative, density=density
        )
        self._fits[_space_key(search_space)] = fit
        self.refits += 1
        return fit


class _Intersection:
    """Optuna's intersection of the distributions of the finished (and pruned) trials, each trial folded in once.
    Optuna's own walks every trial from the oldest running one at each call: with thousands running, nearly all of
    them again and again. Here only the new trials and those running or waiting at the last call are looked at (a
    finished trial never changes)."""

    def __init__(self, study: tuple[int, int]) -> None:
        self.study = study
        self._changes = TrialChanges()
        self._space: dict[str, BaseDistribution] | None = None

    def update(self, study: Study) -> dict[str, BaseDistribution]:
        """The intersection, sorted by name, without single-valued distributions (as TPE infers it)."""
        trials = op.get_trials(study, deepcopy=False, use_cache=True)
        fresh = self._changes.since(trials)
        if fresh is None:  # not numbered by position: every trial, afresh
            self._changes, self._space = TrialChanges(), None
        for trial in trials if fresh is None else map(trials.__getitem__, fresh):
            if trial.state in _FOLDED:
                self._fold(trial.distributions)
        return self._inferred()

    def _inferred(self) -> dict[str, BaseDistribution]:
        return {name: d for name, d in sorted((self._space or {}).items()) if not d.single()}

    def _fold(self, distributions: dict[str, BaseDistribution]) -> None:
        if self._space is None:
            self._space = dict(distributions)
        else:
            self._space = {n: d for n, d in self._space.items() if _equal(distributions.get(n), d)}


def _equal(other: BaseDistribution | None, distribution: BaseDistribution) -> bool:
    """Optuna's equality of two distributions, answered at C speed when their attributes are equal as they stand:
    each trial holds its own copies, and Optuna compares a categorical choice by choice (240,000 comparisons took
    2 s at 40,000 trials). Attributes that differ as they stand (a NaN choice in each) get Optuna's answer."""
    if other is distribution or (type(other) is type(distribution) and other.__dict__ == distribution.__dict__):
        return True
    return other == distribution


_FOLDED = (TrialState.COMPLETE, TrialState.PRUNED)


def _gamma_of(study: Study) -> Callable[[int], int]:
    """Optuna's default split of the trials into below and above, as its ``_sample`` picks it."""
    return op.default_gamma if len(study.directions) <= 1 else op.default_gamma_multiobjective


def _acquisition_grid(below: op.ParzenEstimator, above: op.ParzenEstimator) -> tuple[np.ndarray, np.ndarray] | None:
    """log l(x) - log g(x) at every point of an all-categorical space of at most ``GRID_CELLS`` points, indexed by
    the choices' positions, and l(x) summed over the points in order; None for any other space. The same values as
    Optuna's log-sum over kernels (to rounding), for the cost of one pass over the kernels instead of one per
    candidate."""
    low, high = _categorical_density(below), _categorical_density(above)
    if low is None or high is None:
        return None
    with np.errstate(divide="ignore"):
        return np.log(low) - np.log(high), np.cumsum(low.reshape(-1))


def _draw_points(cumulative: np.ndarray, rng: np.random.RandomState, size: int) -> np.ndarray:
    """``size`` flat grid points drawn with the probabilities whose running sum is ``cumulative``."""
    uniform = rng.random_sample(size) * cumulative[-1]
    return np.minimum(np.searchsorted(cumulative, uniform, side="right"), cumulative.size - 1)


def _categorical_density(estimator: op.ParzenEstimator) -> np.ndarray | None:
    """The mixture's density at every point of its space, or None if a parameter is not categorical or the space
    is too large. A kernel's row of choice weights depends only on its observed choice (or is the prior's), so the
    kernels' weights are summed per combination of distinct rows, then each axis is mapped to the choices."""
    mixture = op.mixture_of(estimator)
    if not all(isinstance(d, op.BatchedCategorical) for d in mixture.distributions):
        return None
    rows, inverses = [], []
    for dist in mixture.distributions:
        split = _distinct_rows(cast(op.BatchedCategorical, dist).weights)
        if split is None:
            return None
        rows.append(split[0])
        inverses.append(split[1])
    shape = tuple(len(r) for r in rows)
    if math.prod(max(r.shape) for r in rows) > GRID_CELLS:
        return None
    kernels = np.ravel_multi_index(inverses, shape)
    density = np.bincount(kernels, weights=mixture.weights, minlength=math.prod(shape)).reshape(shape)
    for axis, distinct in enumerate(rows):
        density = np.moveaxis(np.tensordot(density, distinct, axes=([axis], [0])), -1, axis)
    return density


def _distinct_rows(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The distinct rows of a kernel-by-choice weight matrix and each kernel's row among them, keyed by the row's
    top choice (a flat row: the prior's) and checked; None if two rows with one key differ. Linear in the kernels
    (the keys, at most one per choice and one more, are counted, not sorted), and column-wise: numpy reduces a
    row of a handful of choices slowly."""
    n, choices = weights.shape
    columns = np.ascontiguousarray(weights.T)
    top = columns.max(axis=0)
    flat = top == columns.min(axis=0)
    key = np.where(flat, choices, (np.arange(choices)[:, None] * (columns == top)).max(axis=0))
    present = np.zeros(choices + 1, dtype=bool)
    present[key] = True
    first = np.empty(choices + 1, dtype=np.intp)
    first[key[::-1]] = np.arange(n - 1, -1, -1)  # each key's first kernel: the last write wins
    distinct = weights[first[present]]
    inverse = (np.cumsum(present) - 1)[key]
    if not np.array_equal(distinct[inverse], weights):
        return None
    return distinct, inverse
