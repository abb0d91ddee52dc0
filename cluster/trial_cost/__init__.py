"""What a trial costs: one model, learned from finished and running trials, that everything predicting reads.

:class:`TrialCostModel` learns a trial's duration, seconds per example and peak memory as functions of its
parameters and resources (batch size, width, model size) and answers each with an :class:`Estimate` (a mean and a
90% interval, and the :class:`Basis` it rests on: a log-linear fit, the nearest configurations, or nothing).
One instance per campaign: the campaign feeds it and reads it (its ETA, budgets, placement, the dispatcher's queue
depth), and hands it to its executor (:class:`TrialPredictions`), whose packing (:class:`cluster.packing.MemoryModel`)
and batch-job walltime check (:class:`cluster.walltimes.Walltimes`) read the same instance; the simulator's trials
follow a :class:`LogLinearLaw`, the form it fits.
"""

from .estimate import Basis, Estimate, Quantity
from .fit import Fit
from .law import ONE_SLOT, LogLinearLaw, Resources, features
from .model import TrialCostModel
from .nearest import param_distance
from .predictions import ModelPredictions, TrialPredictions

__all__ = [
    "Basis",
    "Estimate",
    "Fit",
    "LogLinearLaw",
    "ModelPredictions",
    "ONE_SLOT",
    "Quantity",
    "Resources",
    "TrialCostModel",
    "TrialPredictions",
    "features",
    "param_distance",
]
