"""The regimes of data parallelism, read off a fitted McCandlish curve.

Shallue et al. 2018, "Measuring the Effects of Data Parallelism on Neural
Network Training". The regimes are read through the *doubling efficiency*::

    r(B) = 2 (1 - S(2B) / S(B))  =  1 / (1 + B / B_noise)

the fraction of the ideal halving of the steps that doubling the batch at B
still buys (1: doubling halves the steps; 0: doubling saves nothing). It is
also the data efficiency ``E_min / E(B)``. ``r >= 0.8`` (``S(2B) <= 0.6 S(B)``,
``B <= B_noise / 4``) is perfect scaling, ``r <= 0.2`` (``S(2B) >= 0.9 S(B)``,
``B >= 4 B_noise``) is maximal data parallelism, and between is diminishing
returns.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

import numpy as np

from search.scaling.inputs import ScalingError
from search.scaling.mccandlish import ScalingFit

__all__ = [
    "Regime",
    "PERFECT_EFFICIENCY",
    "MAXIMAL_EFFICIENCY",
    "scaling_efficiency",
    "regime_boundaries",
    "classify_regimes",
]

PERFECT_EFFICIENCY = 0.8  # r(B) >= this: perfect scaling (S(2B) <= 0.6 S(B))
MAXIMAL_EFFICIENCY = 0.2  # r(B) <= this: maximal data parallelism (S(2B) >= 0.9 S(B))


class Regime(enum.Enum):
    """Shallue et al. (2018)'s three regimes of steps-to-target against batch size."""

    PERFECT_SCALING = "perfect scaling"
    DIMINISHING_RETURNS = "diminishing returns"
    MAXIMAL_DATA_PARALLELISM = "maximal data parallelism"


def _check_thresholds(perfect: float, maximal: float) -> None:
    if not 0 < maximal < perfect < 1:
        raise ScalingError(
            "thresholds", f"need 0 < maximal < perfect < 1, got perfect={perfect!r}, maximal={maximal!r}"
        )


def scaling_efficiency(fit: ScalingFit, batch_size: float | np.ndarray) -> float | np.ndarray:
    """Doubling efficiency ``r(B) = 2 (1 - S(2B)/S(B))`` on the fitted curve (= ``1/(1 + B/B_noise)``)."""
    b = np.asarray(batch_size, dtype=float)
    result = 2.0 * (1.0 - np.asarray(fit.predict_steps(2 * b)) / np.asarray(fit.predict_steps(b)))
    return float(result) if np.ndim(result) == 0 else result


def regime_boundaries(
    fit: ScalingFit, perfect: float = PERFECT_EFFICIENCY, maximal: float = MAXIMAL_EFFICIENCY
) -> tuple[float, float]:
    """``(B_perfect, B_maximal)``: perfect scaling for ``B <= B_perfect``, maximal data parallelism for ``B >= B_maximal``.

    ``r(B) >= p  <=>  B <= B_noise (1/p - 1)``; with the default thresholds
    ``B_noise / 4`` and ``4 B_noise``.
    """
    _check_thresholds(perfect, maximal)
    return fit.b_noise * (1 / perfect - 1), fit.b_noise * (1 / maximal - 1)


def classify_regimes(
    fit: ScalingFit,
    batch_sizes: Iterable[int],
    *,
    perfect: float = PERFECT_EFFICIENCY,
    maximal: float = MAXIMAL_EFFICIENCY,
) -> dict[int, Regime]:
    """Each batch size's regime on the fitted curve, by its doubling efficiency ``r(B)``.

    ``r >= perfect`` (default 0.8: doubling cuts the steps to at most 0.6x):
    perfect scaling; ``r <= maximal`` (default 0.2: doubling still leaves at
    least 0.9x the steps): maximal data parallelism; otherwise diminishing
    returns.
    """
    _check_thresholds(perfect, maximal)
    regimes: dict[int, Regime] = {}
    for b in batch_sizes:
        r = scaling_efficiency(fit, b)
        if r >= perfect:
            regimes[b] = Regime.PERFECT_SCALING
        elif r <= maximal:
            regimes[b] = Regime.MAXIMAL_DATA_PARALLELISM
        else:
            regimes[b] = Regime.DIMINISHING_RETURNS
    return regimes
