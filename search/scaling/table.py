"""The scaling table: one row per batch size (best trial, steps/examples/seconds to target, regime, fit)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from search.scaling.mccandlish import ScalingFit
from search.scaling.regimes import Regime, scaling_efficiency
from search.scaling.target import TargetHit

__all__ = ["TrialOutcome", "TABLE_COLUMNS", "scaling_table", "reached_points", "write_scaling_table"]


@dataclasses.dataclass(frozen=True)
class TrialOutcome:
    """One finished trial of the sweep: its batch size, learning rate and target hit (``None``: not reached)."""

    batch_size: int
    lr: float | None
    hit: TargetHit | None
    trial: int | None = None


TABLE_COLUMNS = (
    "batch_size",
    "status",
    "trials",
    "trials_reached",
    "best_trial",
    "steps_to_target",
    "examples_to_target",
    "wall_seconds",
    "best_lr",
    "regime",
    "fitted_steps",
    "efficiency",
)


def _best(outcomes: Sequence[TrialOutcome]) -> TrialOutcome | None:
    hits = [o for o in outcomes if o.hit is not None]
    if not hits:
        return None
    return min(hits, key=lambda o: (o.hit.steps, o.hit.seconds if o.hit.seconds is not None else math.inf))  # type: ignore[union-attr]


def scaling_table(
    outcomes: Iterable[TrialOutcome],
    batch_sizes: Iterable[int],
    *,
    fit: ScalingFit | None = None,
    regimes: Mapping[int, Regime] | None = None,
) -> pd.DataFrame:
    """One row per batch size of the sweep, in ascending order; none is dropped.

    The best trial at a batch size is the one with the fewest steps to target
    (ties: least wall time). ``status`` is ``"reached"``, ``"not reached"``
    (trials ran, none reached the target: the target columns are NaN) or
    ``"no trials"``. ``examples_to_target`` falls back to ``steps * B`` when
    the reports carried no examples counter. ``regime`` (from ``regimes``) is
    filled for reached rows only; ``fitted_steps`` and ``efficiency`` (the
    doubling efficiency r(B)) come from ``fit`` when given.
    """
    by_b: dict[int, list[TrialOutcome]] = {int(b): [] for b in batch_sizes}
    for o in outcomes:
        by_b.setdefault(int(o.batch_size), []).append(o)
    rows = []
    for b in sorted(by_b):
        trials = by_b[b]
        best = _best(trials)
        hit = best.hit if best is not None else None
        row: dict[str, object] = {
            "batch_size": b,
            "status": "reached" if hit is not None else ("not reached" if trials else "no trials"),
            "trials": len(trials),
            "trials_reached": sum(o.hit is not None for o in trials),
            "best_trial": best.trial if best is not None and best.trial is not None else pd.NA,
            "steps_to_target": hit.steps if hit else math.nan,
            "examples_to_target": (hit.examples if hit.examples is not None else hit.steps * b) if hit else math.nan,
            "wall_seconds": hit.seconds if hit and hit.seconds is not None else math.nan,
            "best_lr": best.lr if best is not None and best.lr is not None else math.nan,
            "regime": regimes[b].value if hit is not None and regimes and b in regimes else "",
            "fitted_steps": fit.predict_steps(b) if fit is not None else math.nan,
            "efficiency": scaling_efficiency(fit, b) if fit is not None else math.nan,
        }
        rows.append(row)
    table = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    table["best_trial"] = table["best_trial"].astype("Int64")
    return table


def reached_points(table: pd.DataFrame, column: str = "steps_to_target") -> tuple[list[int], list[float]]:
    """``(batch sizes, values)`` of the rows that reached the target: the fit's input."""
    rows = table[table["status"] == "reached"]
    return [int(b) for b in rows["batch_size"]], [float(v) for v in rows[column]]


def write_scaling_table(table: pd.DataFrame, path: str | Path) -> Path:
    """Write ``table`` as CSV (NaN as empty cells; the ``status`` column names unreached rows)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, index=False, na_rep="")
    return path
