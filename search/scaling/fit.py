"""Batch-size scaling analysis: steps-to-target, the McCandlish fit, regimes, the LR rule.

Pure analysis (numpy, scipy, pandas): no Dask, no Optuna, no torch. The
controller runs the per-batch-size searches and hands these modules what the
trials reported; everything here is a function of those numbers.

This module is the analysis' public face: it re-exports the names of the
modules that do each job, one job per module:

- :mod:`search.scaling.inputs`: :class:`ScalingError` and the input checks
- :mod:`search.scaling.target`: where a trial first reached the target
- :mod:`search.scaling.mccandlish`: the McCandlish fit (:class:`ScalingFit`)
- :mod:`search.scaling.bootstrap`: a bootstrap interval for ``B_crit``
- :mod:`search.scaling.profile`: the profile likelihood of ``B_crit`` and the band of curves it admits
- :mod:`search.scaling.synthetic`: synthetic sweeps with a known ``B_noise``, to check all of the above
- :mod:`search.scaling.regimes`: Shallue et al.'s regimes, by doubling efficiency
- :mod:`search.scaling.lr_rule`: the learning-rate rule ``lr ∝ B^alpha``
- :mod:`search.scaling.conclusion`: the paragraph that sums it up
- :mod:`search.scaling.table`: one row per batch size, and its CSV

The model (McCandlish et al. 2018, "An Empirical Model of Large-Batch
Training", eq. 2.11)::

    S(B) = S_min (1 + B_noise / B)        steps to reach the target
    E(B) = B S(B) = E_min (1 + B / B_noise)  examples to reach the target
    E_min = S_min B_noise,   B_crit = E_min / S_min = B_noise

Written as ``S(B) = S_min + E_min / B`` the model is linear in ``1/B``, which is
how it is fitted and evaluated (so ``B_noise = inf`` and ``B_noise = 0`` stay
representable).

The regimes (Shallue et al. 2018, "Measuring the Effects of Data Parallelism
on Neural Network Training") are read off the fitted curve through the
*doubling efficiency*::

    r(B) = 2 (1 - S(2B) / S(B))  =  1 / (1 + B / B_noise)

the fraction of the ideal halving of the steps that doubling the batch at B
still buys (1: doubling halves the steps; 0: doubling saves nothing). It is
also the data efficiency ``E_min / E(B)``. ``r >= 0.8`` (``S(2B) <= 0.6 S(B)``,
``B <= B_noise / 4``) is perfect scaling, ``r <= 0.2`` (``S(2B) >= 0.9 S(B)``,
``B >= 4 B_noise``) is maximal data parallelism, and between is diminishing
returns.
"""

from __future__ import annotations

from search.scaling.bootstrap import bootstrap_b_crit
from search.scaling.conclusion import conclusion
from search.scaling.inputs import ScalingError, validate_batch_sizes
from search.scaling.lr_rule import LRRuleFit, RuleVerdict, lr_rule_fit
from search.scaling.mccandlish import ScalingFit, fit_many, fit_mccandlish
from search.scaling.profile import likelihood_interval, steps_band
from search.scaling.regimes import (
    MAXIMAL_EFFICIENCY,
    PERFECT_EFFICIENCY,
    Regime,
    classify_regimes,
    regime_boundaries,
    scaling_efficiency,
)
from search.scaling.table import TABLE_COLUMNS, TrialOutcome, reached_points, scaling_table, write_scaling_table
from search.scaling.target import Mode, TargetHit, steps_to_target

__all__ = [
    "ScalingError",
    "TargetHit",
    "steps_to_target",
    "ScalingFit",
    "fit_mccandlish",
    "fit_many",
    "bootstrap_b_crit",
    "likelihood_interval",
    "steps_band",
    "Regime",
    "PERFECT_EFFICIENCY",
    "MAXIMAL_EFFICIENCY",
    "scaling_efficiency",
    "regime_boundaries",
    "classify_regimes",
    "LRRuleFit",
    "lr_rule_fit",
    "RuleVerdict",
    "conclusion",
    "validate_batch_sizes",
    "TrialOutcome",
    "scaling_table",
    "reached_points",
    "write_scaling_table",
    "TABLE_COLUMNS",
    "Mode",
]
