"""What an executor reads of the campaign's trial model: :class:`TrialPredictions`, a small protocol the campaign's
ledger of costs (``search.loop.costs.TrialCosts``) satisfies and hands to its executor when it is built, so that
the executor's predictions (a batch job's walltime against a trial's duration, the packing's device memory) come
from the one model the campaign feeds; :class:`ModelPredictions`, the same read straight from a model, which an
executor holds until a campaign hands it its own (nothing feeds it: it knows nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from .estimate import Estimate, Quantity
from .law import Resources
from .model import RECENT, TrialCostModel

__all__ = ["ModelPredictions", "TrialPredictions"]


class TrialPredictions(Protocol):
    """The campaign's trial model as an executor reads it: ``model`` (its peak memory: the packing), a trial's
    predicted full run (``duration``) and the median of the recent runs (``typical_run``; None: none ended)."""

    model: TrialCostModel

    def duration(self, params: Mapping[str, Any], width: int, epochs: int) -> Estimate: ...

    def typical_run(self) -> float | None: ...


class ModelPredictions:
    """:class:`TrialPredictions` read straight from ``model`` (a new, empty one by default): a trial's duration is
    the durations of similar runs (no examples per epoch known here), the typical run the median of the last
    :data:`~cluster.trial_cost.model.RECENT` runs."""

    def __init__(self, model: TrialCostModel | None = None) -> None:
        self.model = model or TrialCostModel()

    def duration(self, params: Mapping[str, Any], width: int, epochs: int) -> Estimate:
        return self.model.predict_duration(params, Resources(width))

    def typical_run(self) -> float | None:
        return self.model.recent_median(Quantity.RUN, RECENT)
