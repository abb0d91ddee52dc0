"""One way to write the sweep's numbers (B_crit, S_min, E_min, B_simple, their intervals), so that the conclusion,
the figures and the report print one value one way: 3 significant figures, thousands separated (``1,310``)."""

from __future__ import annotations

import math

__all__ = ["approx"]


def approx(x: float) -> str:
    """``x`` to 3 significant figures, thousands separated: 1305.2 -> ``1,310``, 88.13 -> ``88``, 4.482 -> ``4.48``,
    0.4821 -> ``0.48``; infinity ``∞``."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    if abs(x) >= 10:
        return f"{float(f'{x:.3g}'):,.0f}"
    return f"{x:.3g}" if abs(x) >= 1 else f"{x:.2g}"
