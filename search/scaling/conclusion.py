"""The scaling sweep's conclusion: one plain-language paragraph from the fits and regimes."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from search.scaling.lr_rule import LRRuleFit
from search.scaling.mccandlish import ScalingFit
from search.scaling.regimes import MAXIMAL_EFFICIENCY, PERFECT_EFFICIENCY, Regime, regime_boundaries

__all__ = ["conclusion"]


def _num(x: float) -> str:
    """A batch size or count for prose: 3 significant figures, thousands separated."""
    if not math.isfinite(x):
        return "∞"
    if x >= 10:
        return f"{float(f'{x:.3g}'):,.0f}"
    return f"{x:.3g}" if x >= 1 else f"{x:.2g}"


def _listed(values: Sequence[int]) -> str:
    names = [str(v) for v in values]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def conclusion(
    fit: ScalingFit,
    regimes: Mapping[int, Regime],
    lr_fit: LRRuleFit | None = None,
    *,
    b_crit_interval: tuple[float, float] | None = None,
    ci: float = 0.9,
    not_reached: Sequence[int] = (),
    perfect: float = PERFECT_EFFICIENCY,
    maximal: float = MAXIMAL_EFFICIENCY,
) -> str:
    """One plain-language paragraph: where doubling pays, where it stops, B_crit, the LR exponent."""
    b_perfect, b_maximal = regime_boundaries(fit, perfect, maximal)
    halve = f"{1 - perfect / 2:.1f}"  # S(2B)/S(B) at the perfect threshold
    saves = f"{maximal / 2:.0%}"  # step saving from doubling at the maximal threshold
    parts: list[str] = []
    if math.isinf(fit.b_noise):
        parts.append(
            "Doubling the batch halved the steps to target at every batch size measured: "
            "the critical batch size lies beyond the largest one tried."
        )
    elif fit.b_noise == 0:
        parts.append(
            "A larger batch never reduced the steps to target: every batch size measured "
            "was already at maximal data parallelism."
        )
    else:
        parts.append(
            f"Up to B≈{_num(b_perfect)}, doubling the batch nearly halves the steps to target "
            f"(to {halve}x or fewer); beyond B≈{_num(b_maximal)} it stops paying "
            f"(doubling saves less than {saves} of the steps)."
        )
        interval = ""
        if b_crit_interval is not None:
            interval = f", {ci:.0%} bootstrap interval {_num(b_crit_interval[0])}–{_num(b_crit_interval[1])}"
        parts.append(
            f"The critical batch size is B_crit≈{_num(fit.b_crit)}{interval}: there the run needs "
            f"2x the minimum steps (S_min≈{_num(fit.s_min)}) and 2x the minimum examples "
            f"(E_min≈{_num(fit.e_min)})."
        )
    by_regime = {r: sorted(b for b, rr in regimes.items() if rr is r) for r in Regime}
    measured = [f"{_listed(bs)} {'is' if len(bs) == 1 else 'are'} in {r.value}" for r, bs in by_regime.items() if bs]
    if measured:
        parts.append("Of the batch sizes measured, " + "; ".join(measured) + ".")
    if not_reached:
        parts.append(f"No trial reached the target at B={_listed(sorted(not_reached))}.")
    if lr_fit is not None:
        stderr = f" ± {lr_fit.alpha_stderr:.2f}" if math.isfinite(lr_fit.alpha_stderr) else ""
        rule = "linear rule (B^1)" if lr_fit.closer_rule == "linear" else "square-root rule (B^0.5)"
        parts.append(f"The best learning rate grew like B^{lr_fit.alpha:.2f}{stderr}, closer to the {rule}.")
    return " ".join(parts)
