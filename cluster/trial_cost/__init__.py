"""What a trial costs: one model, learned from finished and running trials, that everything predicting reads.

:class:`TrialCostModel` learns a trial's duration, seconds per example and peak memory as functions of its
parameters and resources (batch size, width, model size) and answers each with an :class:`Estimate` (a mean and a
90% interval, and the :class:`Basis` it rests on: a log-linear fit, the nearest configurations, or nothing).
The packing (:class:`cluster.packing.MemoryModel`), the dispatcher's queue depth, the batch-job walltime check
(:class:`cluster.jobs.Walltimes`), the campaign's ETA and budgets read it; the simulator's trials follow a
:class:`LogLinearLaw`, the form it fits.
"""

from .estimate import Basis, Estimate, Quantity
from .fit import Fit
from .law import ONE_SLOT, LogLinearLaw, Resources, features
from .model import TrialCostModel
from .nearest import param_distance

__all__ = [
    "Basis",
    "Estimate",
    "Fit",
    "LogLinearLaw",
    "ONE_SLOT",
    "Quantity",
    "Resources",
    "TrialCostModel",
    "features",
    "param_distance",
]
