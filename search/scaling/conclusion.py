"""The scaling sweep's conclusion: one plain-language paragraph that states only what was measured.

Every regime it names for a batch size is the one the scaling table lists
(the same ``regimes`` mapping); a fitted boundary is printed with as many
digits as it takes to fall on the same side of every measured batch size
as the regimes say; the ``B_crit`` interval is stated with its open ends
spelled out; batch sizes whose regime flips within that interval are named;
the measured ``S(2B)/S(B)`` ratios are set against the fitted regimes; every
fitted figure outside the measured batch sizes (``S_min`` and ``E_min``
always) is named an extrapolation, with an interval or "not determined by
these batch sizes" (:mod:`search.scaling.measured`); and a learning-rate rule is recommended only when the exponent's interval
contains exactly one of the two reference exponents (0.5 and 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from search.scaling.forced_rule import ForcedRule
from search.scaling.lr_rule import LRRuleFit
from search.scaling.mccandlish import ScalingFit
from search.scaling.measured import limit_intervals, outside_text, ratio_sentence
from search.scaling.numbers import approx
from search.scaling.regimes import MAXIMAL_EFFICIENCY, PERFECT_EFFICIENCY, Regime, regime_boundaries

__all__ = ["conclusion", "lr_sentence", "boundary_text"]


_num = approx  # a batch size or count for prose: as the figures and the report write it


def _listed(values: Sequence[int]) -> str:
    names = [str(v) for v in values]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _plain(v: float) -> str:
    return f"{int(v):,}" if v == int(v) else f"{v:,}"


def boundary_text(x: float, fits: Callable[[float], bool]) -> str:
    """``x`` with the fewest significant figures (3 or more) whose rounded value still ``fits``."""
    for digits in range(3, 13):
        v = float(f"{x:.{digits}g}")
        if fits(v):
            return _plain(v)
    return _plain(float(f"{x:.12g}"))


def _measured(x: float) -> str:
    """A measured count for prose: 4 significant figures, thousands separated."""
    return _plain(float(f"{x:.4g}"))


def _range(low: float, high: float) -> str:
    if low > 0 and math.isfinite(high):
        return f"{_num(low)}–{_num(high)}"
    if low > 0:
        return f"above {_num(low)}"
    return f"below {_num(high)}" if math.isfinite(high) else "unbounded"


def _interval_text(low: float, high: float, ci: str) -> str:
    if low > 0 and math.isfinite(high):
        return f"{ci} interval {_range(low, high)}"
    if low > 0:
        return f"{ci} interval: {_range(low, high)}, not bounded above by these data"
    if math.isfinite(high):
        return f"{ci} interval: {_range(low, high)}, not bounded below by these data"
    return f"{ci} interval: unbounded, these data do not determine it"


def _regime_sentence(by_regime: Mapping[Regime, list[int]], halve: str, keep: str, saves: str) -> str:
    clauses = {
        Regime.PERFECT_SCALING: f"to {halve}x or fewer (perfect scaling) at B={{}}",
        Regime.DIMINISHING_RETURNS: f"to between {halve}x and {keep}x (diminishing returns) at B={{}}",
        Regime.MAXIMAL_DATA_PARALLELISM: (
            f"only to {keep}x or more, saving {saves} or less (maximal data parallelism) at B={{}}"
        ),
    }
    parts = [clauses[r].format(_listed(bs)) for r, bs in by_regime.items() if bs]
    joined = parts[0] if len(parts) == 1 else "; ".join(parts[:-1]) + "; and " + parts[-1]
    return f"On the fitted curve, doubling the batch size cut the steps to target {joined}."


def _notes(x: float, measured: Sequence[int], interval: tuple[float, float] | None, ci: str) -> str:
    """After "B≈x": where it lies when outside the measured batch sizes (an extrapolation, and with no
    bounded interval one these batch sizes do not determine), then its interval; "" when neither applies."""
    notes = []
    where = outside_text(x, measured) if measured else ""
    if where:
        bounded = interval is not None and interval[0] > 0 and math.isfinite(interval[1])
        notes.append(where[2:] + ("" if bounded else ", not determined by these batch sizes"))
    if interval is not None:
        notes.append(_interval_text(*interval, ci))
    return f" ({'; '.join(notes)})" if notes else ""


def _boundaries(
    fit: ScalingFit,
    by_regime: Mapping[Regime, list[int]],
    interval: tuple[float, float] | None,
    ci: str,
    perfect: float,
    maximal: float,
) -> list[str]:
    b_perfect, b_maximal = regime_boundaries(fit, perfect, maximal)
    inside = by_regime[Regime.PERFECT_SCALING]
    beyond = by_regime[Regime.MAXIMAL_DATA_PARALLELISM]
    rest_p = [b for bs in by_regime.values() for b in bs if b not in inside]
    rest_m = [b for bs in by_regime.values() for b in bs if b not in beyond]
    p_text = boundary_text(b_perfect, lambda v: all(b <= v for b in inside) and all(b > v for b in rest_p))
    m_text = boundary_text(b_maximal, lambda v: all(b >= v for b in beyond) and all(b < v for b in rest_m))
    measured = sorted(b for bs in by_regime.values() for b in bs)
    kp, km = 1 / perfect - 1, 1 / maximal - 1  # boundary = B_noise x k
    p_interval = None if interval is None else (interval[0] * kp, interval[1] * kp)
    m_interval = None if interval is None else (interval[0] * km, interval[1] * km)
    text = (
        f"The fit puts the end of perfect scaling at B≈{p_text}{_notes(b_perfect, measured, p_interval, ci)} "
        f"and the start of maximal data parallelism at B≈{m_text}{_notes(b_maximal, measured, m_interval, ci)}."
    )
    if p_interval is None or m_interval is None:
        return [text]
    unsettled = [b for b in measured if p_interval[0] <= b <= p_interval[1] or m_interval[0] <= b <= m_interval[1]]
    if not unsettled:
        return [text]
    return [
        text,
        f"The regime of B={_listed(unsettled)} is not settled: with B_crit elsewhere in its "
        f"interval it could be a neighbouring one.",
    ]


def _limits(measured: Mapping[int, float], interval: tuple[float, float] | None, ci: str) -> str:
    """``S_min`` and ``E_min``: limits of the fit outside any batch size, so always extrapolations; their interval."""
    text = "S_min and E_min are the fit's limits for an unbounded and a vanishing batch size, so extrapolations"
    if measured:
        b_s = min(measured, key=lambda b: measured[b])
        b_e = min(measured, key=lambda b: measured[b] * b)
        text += (
            f": the fewest steps measured were {_measured(measured[b_s])} (B={b_s}) and the fewest "
            f"examples (steps × B) {_measured(measured[b_e] * b_e)} (B={b_e})"
        )
    if interval is None or not measured:
        why = "no interval was computed" if interval is None else "the measured steps were not given"
        return text + f", not determined by these batch sizes ({why})."
    (s_lo, s_hi), (e_lo, e_hi) = limit_intervals(sorted(measured), [measured[b] for b in sorted(measured)], interval)
    return text + f"; S_min {_interval_text(s_lo, s_hi, ci)}; E_min {_interval_text(e_lo, e_hi, ci)}."


def _critical(
    fit: ScalingFit, measured: Mapping[int, float], b_crit_interval: tuple[float, float] | None, ci: str
) -> list[str]:
    notes = _notes(fit.b_crit, sorted(measured), b_crit_interval, ci)
    return [
        f"The critical batch size is B_crit≈{_num(fit.b_crit)}{notes}: there a run needs "
        f"2x the minimum steps (S_min≈{_num(fit.s_min)}) and 2x the minimum examples (E_min≈{_num(fit.e_min)}).",
        _limits(measured, b_crit_interval, ci),
    ]


def lr_sentence(lr_fit: LRRuleFit, ci: float = 0.9, forced: ForcedRule | None = None) -> str:
    """What the best learning rates say about ``lr ∝ B^alpha``: a rule only when the interval picks one, and none
    when the design forced the exponent (``forced``: every rate scaled by the spec's rule)."""
    low, high = lr_fit.alpha_interval(ci)
    grew = f"The best learning rate grew like B^{lr_fit.alpha:.2f}"
    verdict = lr_fit.verdict(ci)
    if forced is not None:
        shown = f" ({ci:.0%} interval {low:.2f} to {high:.2f})" if math.isfinite(low) and math.isfinite(high) else ""
        sizes = lr_fit.batch_sizes
        return f"{grew}{shown}. " + forced.sentence(lr_fit.alpha, min(sizes), max(sizes))
    if not (math.isfinite(low) and math.isfinite(high)):
        return (
            f"{grew}, but from too few batch sizes to bound the exponent: whether the square-root rule "
            f"(B^0.5) or the linear rule (B^1) holds is undetermined. To settle it, measure the best "
            f"learning rate at 3 or more batch sizes."
        )
    grew += f" ({ci:.0%} interval {low:.2f} to {high:.2f})"
    if verdict == "undetermined":
        return (
            f"{grew}, which contains both the square-root rule (B^0.5) and the linear rule (B^1): "
            f"which one holds is undetermined. To settle it, narrow the exponent's interval below the "
            f"gap of 0.5 between the rules: more batch sizes over a wider range, or more trials per batch "
            f"size so that the best learning rate at each is pinned down."
        )
    if verdict == "linear":
        return f"{grew}: consistent with the linear rule (B^1), not with the square-root rule (B^0.5)."
    if verdict == "sqrt":
        return f"{grew}: consistent with the square-root rule (B^0.5), not with the linear rule (B^1)."
    where = "between" if 0.5 < low and high < 1 else "outside"
    return (
        f"{grew}: {where} the square-root rule (B^0.5) and the linear rule (B^1), consistent with neither; "
        f"scale the learning rate with the fitted exponent."
    )


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
    interpolated: bool = True,
    measured: Mapping[int, float] | None = None,
    forced: ForcedRule | None = None,
    tuned: str = "",
) -> str:
    """One plain-language paragraph: each measured batch size's regime, the boundaries, B_crit, the LR rule.

    ``regimes`` must be the mapping the scaling table shows; every regime
    statement is read from it. The measured steps per batch size (``measured``,
    by default the fit's own points) are set against the fit: their
    ``S(2B)/S(B)`` ratios are compared with the fitted regimes, every fitted
    figure outside the measured batch sizes is named an extrapolation, and
    ``S_min``/``E_min`` get intervals from ``b_crit_interval``.
    ``interpolated=False`` (steps counted at report granularity) adds that the
    steps are upper bounds and bias ``B_crit`` upward. ``forced``: the rates were searched in windows that
    follow the spec's ``lr_scaling`` rule, so the fitted exponent is named the design's, not a finding. ``tuned``:
    how an ``lr_grid`` tuned the rate at each batch size (:func:`~search.scaling.lr_grid.bracket_sentence`), said
    before the exponent.
    """
    halve = f"{1 - perfect / 2:.2g}"  # S(2B)/S(B) at the perfect threshold
    keep = f"{1 - maximal / 2:.2g}"  # S(2B)/S(B) at the maximal threshold
    saves = f"{maximal / 2:.0%}"  # step saving from doubling at the maximal threshold
    level = f"{ci:.0%}"
    by_regime = {r: sorted(b for b, rr in regimes.items() if rr is r) for r in Regime}
    parts: list[str] = []
    if measured is None:
        measured = {int(b): float(v) for b, v in zip(fit.batch_sizes, fit.steps, strict=True)}
    if any(by_regime.values()):
        parts.append(_regime_sentence(by_regime, halve, keep, saves))
        ratios = ratio_sentence(measured, regimes, perfect, maximal)
        parts += [ratios] if ratios else []
    interval = "" if b_crit_interval is None else f" ({_interval_text(*b_crit_interval, level)})"
    if math.isinf(fit.b_noise):
        parts.append(
            "The fitted steps fall as 1/B over the whole range: the critical batch size lies beyond "
            f"the largest batch size tried{interval}."
        )
    elif fit.b_noise == 0:
        parts.append(f"A larger batch never reduced the fitted steps to target{interval}.")
    else:
        if any(by_regime.values()):
            parts.extend(_boundaries(fit, by_regime, b_crit_interval, level, perfect, maximal))
        parts.extend(_critical(fit, measured, b_crit_interval, level))
    if not_reached:
        parts.append(f"No trial reached the target at B={_listed(sorted(not_reached))}.")
    if not interpolated:
        parts.append(
            "Steps were counted at report granularity (interpolate = false): each is an upper bound by up "
            "to one report interval, which biases B_crit upward; the interval does not include this."
        )
    parts += [tuned] if tuned else []
    if lr_fit is not None:
        parts.append(lr_sentence(lr_fit, ci, forced))
    return " ".join(parts)
