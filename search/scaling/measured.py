"""What a sweep measured, set against what its fit says: the range, S(2B)/S(B), and the fit's extrapolations.

A fitted McCandlish curve speaks for every batch size; the sweep measured only
a few. The conclusion uses these helpers to keep the two apart: a fitted
figure outside the measured batch sizes is named an extrapolation, ``S_min``
(the limit for an unbounded batch) and ``E_min`` (for a vanishing one) always
are, their intervals come from the same profile likelihood as ``B_crit``'s,
and the measured doubling ratios ``S(2B)/S(B)`` are compared with the regimes
the fitted curve gives.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from search.scaling.regimes import MAXIMAL_EFFICIENCY, PERFECT_EFFICIENCY, Regime

__all__ = ["outside_text", "doubling_ratios", "measured_regime", "ratio_sentence", "limit_intervals"]


def outside_text(x: float, sizes: Sequence[float]) -> str:
    """``""`` when ``x`` lies within the measured batch sizes, else where it lies (to follow "B≈x")."""
    low, high = min(sizes), max(sizes)
    if x > high:
        return f", beyond the largest batch size measured, {high:g}: an extrapolation of the fit"
    if x < low:
        return f", below the smallest batch size measured, {low:g}: an extrapolation of the fit"
    return ""


def doubling_ratios(measured: Mapping[int, float]) -> dict[int, float]:
    """``{B: S(2B)/S(B)}`` for every measured ``B`` whose double was measured too."""
    return {b: measured[2 * b] / measured[b] for b in sorted(measured) if 2 * b in measured and measured[b] > 0}


def measured_regime(ratio: float, perfect: float = PERFECT_EFFICIENCY, maximal: float = MAXIMAL_EFFICIENCY) -> Regime:
    """The regime a measured ``S(2B)/S(B)`` says, by the thresholds the fitted regimes use."""
    efficiency = 2.0 * (1.0 - ratio)
    if efficiency >= perfect:
        return Regime.PERFECT_SCALING
    if efficiency <= maximal:
        return Regime.MAXIMAL_DATA_PARALLELISM
    return Regime.DIMINISHING_RETURNS


def _listed(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def ratio_sentence(
    measured: Mapping[int, float],
    regimes: Mapping[int, Regime],
    perfect: float = PERFECT_EFFICIENCY,
    maximal: float = MAXIMAL_EFFICIENCY,
) -> str:
    """The measured ``S(2B)/S(B)``, and where the regime they say differs from the fitted curve's ("" if none)."""
    ratios = {b: r for b, r in doubling_ratios(measured).items() if b in regimes}
    if not ratios:
        return ""
    shown = _listed([f"{r:.2f}x at B={b}" for b, r in ratios.items()])
    text = f"Measured, doubling the batch size took the steps to target to {shown}."
    differ = {b: measured_regime(r, perfect, maximal) for b, r in ratios.items()}
    differ = {b: m for b, m in differ.items() if m is not regimes[b]}
    if not differ:
        return text + " Each of these ratios falls in the regime the fitted curve gives there."
    parts = [f"B={b} (measured {ratios[b]:.2f}x: {m.value}; fitted: {regimes[b].value})" for b, m in differ.items()]
    return text + (
        f" The measured ratios disagree with the fitted curve at {_listed(parts)}; the fitted regime "
        f"there rests on the curve through all batch sizes, not on these measurements alone."
    )


def _s_min_at(b: np.ndarray, y: np.ndarray, b0: float) -> float:
    """The best ``S_min`` with ``B_noise`` held at ``b0`` (the profile fit, in log space)."""
    if math.isinf(b0):
        return 0.0
    return float(np.exp(np.mean(y - np.log1p(b0 / b))))


def _e_min_at(b: np.ndarray, y: np.ndarray, b0: float) -> float:
    if math.isinf(b0):
        return float(np.exp(np.mean(y + np.log(b))))
    return _s_min_at(b, y, b0) * b0


def limit_intervals(
    sizes: Sequence[float], steps: Sequence[float], b_crit_interval: tuple[float, float]
) -> tuple[tuple[float, float], tuple[float, float]]:
    """``(S_min interval, E_min interval)`` over the curves whose ``B_crit`` lies in ``b_crit_interval``.

    With ``B_noise`` held at ``B0`` the best ``S_min`` falls and the best
    ``E_min`` rises with ``B0``, so the interval's ends give theirs; an open
    upper end (a ``1/B`` curve) leaves ``S_min`` unbounded below (``0``), an
    open lower end (flat steps) leaves ``E_min`` so.
    """
    b = np.asarray(sizes, dtype=float)
    y = np.log(np.asarray(steps, dtype=float))
    low, high = b_crit_interval
    s = sorted((_s_min_at(b, y, low), _s_min_at(b, y, high)))
    e = sorted((_e_min_at(b, y, low), _e_min_at(b, y, high)))
    return (s[0], s[1]), (e[0], e[1])
