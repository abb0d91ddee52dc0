"""Cost-aware TPE (``sampler = "cost_tpe"``): expected improvement per unit of predicted cost, cost-cooled.

TPE picks, among candidates drawn from l(x) (the density of the best trials), the one with the largest
l(x)/g(x), which orders them as their expected improvement does: EI(x) is proportional to
``1 / (gamma + (1 - gamma) g(x)/l(x))`` (Bergstra et al., 2011; ``gamma`` the share of trials in the best group).
:class:`CostTPESampler` divides that EI by the candidate's predicted cost to the power ``alpha``: in logs,
``log EI(x) - alpha * log cost(x)``. EI, not the ratio: the ratio of two densities over several parameters spans
many orders of magnitude among the candidates (4 to 8 nats on NAS-Bench-201's six ops), so a cost term against it
would rarely change the pick (1 ask in 10 there), while EI saturates at ``1 / gamma`` for the candidates that look
like the best trials, and among those the cheaper wins. The cost is a trial's slot-seconds (every run, pruned
and failed ones too), as the campaign records it on each trial it tells (:data:`COST_KEY`), predicted by the
trial model (:class:`cluster.trial_cost.TrialCostModel`, quantity ``run``) refitted from the study's finished
trials, so it works on a replica study in a child process as it does inline.

``alpha`` is cooled as in CArBO (Lee et al., 2020) and NePS's cost-cooling: ``cost_exponent`` times the share of
the budget left, where the budget is the trial budget (``[study] n_trials``) and, with ``cost_hours`` > 0, that
many slot-hours: whichever is more used up. Used means committed: the running trials count (the trial budget:
each one; the slot-hours: each one's predicted cost), or on many workers the cooling would lag a whole wave behind
(64 trials running of a budget of 100 are 64% of it, not 0%). Early on cheap regions are explored first; by the end the pick is
plain TPE's, so the final value is not traded away for cheapness. Before any cost is known the pick is TPE's.

Options: ``cost_pick = "competitive"`` weighs the cost only among the candidates whose log l(x)/g(x) is within
``cost_margin`` nats of the largest (:func:`competitive_pick`: the others cannot win by being cheap; the score
there is the log ratio less ``alpha`` times the log cost). ``cost_model = "ridge"`` predicts the cost by
:class:`search.sampling.cost_ridge.RidgeCost` instead of the trial model (better ranked from the first trials).
``cost_cooling = "spent"`` counts only what has ended as used. On NAS-Bench-201 none of them reaches plain TPE's
best with 1.3x fewer slot-hours (bench/NOTES.md, issue 52).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from cluster.trial_cost import ONE_SLOT, Quantity, TrialCostModel
from search.compat import optuna_private as op
from search.sampling.cost_ridge import RidgeCost
from search.sampling.tpe import RefitTPESampler, _draw_points, _study_key

__all__ = [
    "CostTPESampler",
    "COST_KEY",
    "competitive_pick",
    "cooled_exponent",
    "cost_weighted",
    "log_improvement",
    "record_cost",
]

PICKS = ("ei", "competitive")
COOLINGS = ("committed", "spent")
MODELS = ("trial", "ridge")

COST_KEY = "hypersweep:cost"
"""The system attribute a cost-aware campaign records on each trial before its tell: the slot-seconds its runs took."""


def record_cost(trial: optuna.Trial, seconds: float) -> None:
    """Record on a live trial, before its tell, the slot-seconds its runs took (:data:`COST_KEY`)."""
    if seconds > 0:
        trial.storage.set_trial_system_attr(op.trial_id(trial), COST_KEY, float(seconds))


def cooled_exponent(exponent: float, used: float) -> float:
    """``alpha``: ``exponent`` times the share of the budget left (``used``: the share spent, clipped to 0..1)."""
    return exponent * (1.0 - min(1.0, max(0.0, used)))


def log_improvement(log_ratio: np.ndarray, gamma: float) -> np.ndarray:
    """TPE's log expected improvement up to a constant, from ``log l - log g``: ``-log(gamma + (1 - gamma) g/l)``
    (``gamma`` in [0, 1): the share of trials in the best group; 0 gives the log ratio itself)."""
    if not 0.0 <= gamma < 1.0:
        raise ValueError(f"gamma must be in [0, 1), got {gamma!r}")
    with np.errstate(divide="ignore"):
        return -np.logaddexp(np.log(gamma), np.log1p(-gamma) - np.asarray(log_ratio, dtype=float))


def cost_weighted(log_ei: np.ndarray, costs: np.ndarray, alpha: float) -> np.ndarray:
    """The acquisition: ``log EI - alpha * log cost`` (a cost <= 0, unknown, leaves EI as it is)."""
    known = costs > 0
    penalty = np.zeros_like(log_ei, dtype=float)
    penalty[known] = alpha * np.log(costs[known])
    return log_ei - penalty


def competitive_pick(log_ratio: np.ndarray, costs: np.ndarray, alpha: float, margin: float) -> int:
    """The candidate with the largest ``log l/g - alpha * log cost`` among those whose ``log l/g`` is within
    ``margin`` of the largest (the competitive ones: the others cannot win by being cheap)."""
    score = cost_weighted(log_ratio, costs, alpha)
    score[log_ratio < np.max(log_ratio) - margin] = -np.inf
    return int(np.argmax(score))


class CostTPESampler(RefitTPESampler):
    """:class:`~search.sampling.tpe.RefitTPESampler` whose pick weighs each candidate by its predicted cost (see
    the module). ``cost_exponent`` >= 0 (0: plain TPE); ``cost_hours`` >= 0, the slot-hours the cooling runs down
    (0: the trial budget alone); ``cost_pick`` (``ei``, ``competitive``) with ``cost_margin`` >= 0 nats;
    ``cost_model`` (``trial``, ``ridge``); ``cost_cooling`` (``committed``, ``spent``); ``budget``: the
    campaign's trial budget."""

    def __init__(
        self,
        *,
        cost_exponent: float = 1.0,
        cost_hours: float = 0.0,
        cost_pick: str = "ei",
        cost_margin: float = 1.0,
        cost_cooling: str = "committed",
        cost_model: str = "trial",
        budget: int | None = None,
        **kwargs: Any,
    ) -> None:
        for name, value in (("cost_exponent", cost_exponent), ("cost_hours", cost_hours), ("cost_margin", cost_margin)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")
        if cost_pick not in PICKS:
            raise ValueError(f"cost_pick must be one of {', '.join(PICKS)}, got {cost_pick!r}")
        if cost_model not in MODELS:
            raise ValueError(f"cost_model must be one of {', '.join(MODELS)}, got {cost_model!r}")
        if cost_cooling not in COOLINGS:
            raise ValueError(f"cost_cooling must be one of {', '.join(COOLINGS)}, got {cost_cooling!r}")
        if budget is not None and budget < 1:
            raise ValueError(f"budget must be a trial count >= 1, got {budget!r}")
        super().__init__(**kwargs)
        self._cost_exponent = float(cost_exponent)
        self._cost_seconds = float(cost_hours) * 3600.0
        self._trial_budget = budget
        self._pick, self._margin, self._cooling = cost_pick, float(cost_margin), cost_cooling
        self._model_kind = cost_model
        self._ridge: RidgeCost | None = None  # with cost_model = "ridge": refitted with the estimators
        self._cost_model: TrialCostModel | None = None  # refitted with the estimators, never pickled
        self._cost_of: tuple[tuple[int, int], int] | None = None  # the study and its trial count the model is of
        self._alpha = 0.0
        self._gamma_share = 0.0  # the share of the finished trials in TPE's best group, at the last refit
        self.last_alpha = 0.0  # the exponent the last cost-weighted pick used

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.update(_cost_model=None, _cost_of=None, _ridge=None)
        return state

    def _refit(self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]) -> Any:
        fit = super()._refit(study, trial, search_space)
        of = (_study_key(study), trial.number)  # one model per ask, whatever number of spaces refit (univariate)
        if self._cost_of != of:
            self._cost_model, self._alpha = self._learn_costs(study, trial.number)
            self._cost_of = of
        return fit

    def _learn_costs(self, study: Study, asking: int) -> tuple[TrialCostModel, float]:
        """The trial model of the finished trials' recorded costs, and the exponent cooled by the share of the
        budget committed: the finished trials and the running ones (all but the ``asking`` one)."""
        model = TrialCostModel(keep=4096)
        spent, finished, split, running, seen = 0.0, 0, 0, [], []
        for t in study.get_trials(deepcopy=False):
            if t.state in (TrialState.RUNNING, TrialState.WAITING):
                if t.number != asking:
                    running.append(t.params)
                continue
            finished += 1
            split += t.state != TrialState.FAIL
            cost = t.system_attrs.get(COST_KEY)
            if isinstance(cost, (int, float)) and cost > 0:
                spent += float(cost)
                seen.append((t.params, float(cost)))
                model.observe_run(t.number, t.params, ONE_SLOT, float(cost), full=True)
        self._ridge = RidgeCost(seen) if self._model_kind == "ridge" else None
        self._gamma_share = min(self._gamma(split) / split, 0.5) if split and self._gamma is not None else 0.0
        committed = self._cooling == "committed"
        used = (finished + len(running) * committed) / self._trial_budget if self._trial_budget else 0.0
        if self._cost_seconds > 0:
            running_cost = self._committed(model, running) if committed else 0.0
            used = max(used, (spent + running_cost) / self._cost_seconds)
        return model, cooled_exponent(self._cost_exponent, used)

    @staticmethod
    def _committed(model: TrialCostModel, running: list[dict[str, Any]]) -> float:
        """The running trials' predicted slot-seconds (0 before any cost is known)."""
        if not running or not model.count(Quantity.RUN):
            return 0.0
        return float(sum(e.mean for e in model.predict_many(Quantity.RUN, [(p, ONE_SLOT) for p in running])))

    def predicted_costs(self, candidates: list[dict[str, Any]]) -> np.ndarray:
        """Each candidate's predicted slot-seconds (0: unknown)."""
        model = self._cost_model
        if model is None or not model.count(Quantity.RUN):
            return np.zeros(len(candidates))
        if self._ridge is not None:
            return self._ridge.predict(candidates)
        return np.asarray([model.predict(Quantity.RUN, c).mean for c in candidates])

    def _sample(self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        fit = self._fit_of(study, search_space)
        if fit is None or self._stale(trial, fit.trials):
            fit = self._refit(study, trial, search_space)
        if self._alpha <= 0 or self._cost_model is None or not self._cost_model.count(Quantity.RUN):
            return super()._sample(study, trial, search_space)
        self.last_alpha = self._alpha
        names = list(search_space)
        if fit.grid is not None and fit.cumulative is not None:
            points = _draw_points(fit.cumulative, self._rng.rng, self._n_ei_candidates)
            index = np.unravel_index(points, fit.grid.shape)
            columns = {name: index[i].astype(float) for i, name in enumerate(names)}
            log_ratio = fit.grid.reshape(-1)[points]
        else:
            columns = fit.below.sample(self._rng.rng, self._n_ei_candidates)
            log_ratio = self._acquisition(fit, columns)
        candidates = [
            {name: search_space[name].to_external_repr(columns[name][i]) for name in names}
            for i in range(len(log_ratio))
        ]
        costs = self.predicted_costs(candidates)
        if self._pick == "competitive":
            best = competitive_pick(np.asarray(log_ratio, dtype=float), costs, self._alpha, self._margin)
        else:
            log_ei = log_improvement(log_ratio, self._gamma_share)
            best = int(np.argmax(cost_weighted(log_ei, costs, self._alpha)))
        return candidates[best]
