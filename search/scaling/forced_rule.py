"""What the sweep's design forces on the learning-rate exponent.

When every trial trains at the searched ``lr`` scaled by the spec's ``lr_scaling`` rule (``sqrt``:
``lr * sqrt(B / base)``, ``linear``: ``lr * B / base``), each batch size's rates lie in one window that
follows the rule: ``[low, high] * (B / base)^a``. Its best rate is inside that window, so the best rates
follow ``B^a`` by construction, give or take the window's width: over batch sizes ``B_min..B_max`` the fitted
exponent can only land within ``a ± ln(high / low) / ln(B_max / B_min)``. The fit then restates the design
(MNIST-1D: 0.52 and 0.48 with the sqrt rule, 0.82 with the linear one, 0.34 on one seed, all inside
their windows' reach); it is a finding only when each batch size's rate is searched in its own window
wide enough to bracket its optimum.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

from optuna.distributions import BaseDistribution, FloatDistribution

from search.scaling.numbers import approx

__all__ = ["ForcedRule", "forced_rule", "RULE_EXPONENTS"]

RULE_EXPONENTS = {"sqrt": 0.5, "linear": 1.0}


@dataclasses.dataclass(frozen=True)
class ForcedRule:
    """The rule the spec scaled every searched rate by, and the searched window (in the rule's base units)."""

    rule: str
    exponent: float
    base_batch_size: int
    low: float
    high: float

    def reach(self, smallest: float, largest: float) -> tuple[float, float]:
        """The exponents a fit over batch sizes ``smallest..largest`` can find inside these windows."""
        if not largest > smallest > 0:
            return (-math.inf, math.inf)
        slack = math.log(self.high / self.low) / math.log(largest / smallest)
        return (self.exponent - slack, self.exponent + slack)

    def sentence(self, alpha: float, smallest: float, largest: float) -> str:
        """The conclusion's words: the exponent is the design's, not a finding."""
        lo, hi = self.reach(smallest, largest)
        formula = "lr × sqrt(B / {b})" if self.rule == "sqrt" else "lr × B / {b}"
        return (
            f"This exponent is forced by the design, not a finding: every batch size searched the learning rate "
            f"in one window scaled by the spec's lr_scaling rule ({self.rule}: "
            f"{formula.format(b=f'{self.base_batch_size:,}')}, lr from {self.low:g} to {self.high:g}, a "
            f"{approx(self.high / self.low)}x window), so the best rates follow B^{self.exponent:g} by construction, "
            f"and a fit over B={smallest:,.0f} to {largest:,.0f} can only land between {lo:.2f} and {hi:.2f} "
            f"(it found {alpha:.2f}). To measure the rule, tune the rate at every batch size: [scaling] lr_grid "
            f"(a grid per batch size, widened until its best rate is inside)."
        )


def forced_rule(trials: Iterable[tuple[Mapping[str, Any], Mapping[str, BaseDistribution]]]) -> ForcedRule | None:
    """The rule forced on the rates, from the trials' (trainer params, distributions); None when the rate was not
    searched under a scaling rule (``lr`` fixed, ``lr_scaling`` "none" or absent) or the trials disagree."""
    found = set()
    for params, distributions in trials:
        rule, searched = str(params.get("lr_scaling", "none")), distributions.get("lr")
        if rule not in RULE_EXPONENTS or not isinstance(searched, FloatDistribution) or searched.low <= 0:
            return None
        base = int(params.get("base_batch_size", 32))
        found.add(ForcedRule(rule, RULE_EXPONENTS[rule], base, float(searched.low), float(searched.high)))
    return found.pop() if len(found) == 1 else None
