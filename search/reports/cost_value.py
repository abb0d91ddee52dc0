"""The report's "Best value against cost" section: the best value so far against the slot- or GPU-hours spent, the
trials in the order they ended (pruned and failed ones cost too). Where a campaign with ``sampler = "cost_tpe"``
should be ahead of plain TPE; two campaigns' reports compare on its axis."""

from __future__ import annotations

from collections.abc import Sequence

from search.reports.cost_status import campaign_cost
from search.reports.data import CampaignData
from search.reports.markup import LeftOut, Section, figure, guard, md_table, note, table
from search.reports.plots import Drawn, _best_so_far, _drawn, _figure
from search.store.records import StudyAttr, TrialRecord
from search.vocab.terms import maximizing

__all__ = ["best_against_cost", "cost_curve", "value_for_cost"]

MARKS = (0.25, 0.5, 0.75, 1.0)  # shares of the cost spent at which the table gives the best so far


def cost_curve(records: Sequence[TrialRecord], maximize: bool) -> list[tuple[float, float]]:
    """(slot-seconds spent, best value so far) after each trial that ended, in the order they ended; a trial without
    a value adds its cost only."""
    ended = sorted((r for r in records if r.finished is not None and r.duration), key=lambda r: r.finished or 0.0)
    spent, costs, values = 0.0, [], []
    for record in ended:
        spent += (record.duration or 0.0) * (record.width or 1)
        value = record.values[0] if record.values else None
        costs.append(spent)
        values.append(float("nan") if value is None else float(value))
    best = _best_so_far(values, maximize)
    return [(c, b) for c, b in zip(costs, best) if b == b]  # before any value: no point


def value_for_cost(curve: Sequence[tuple[float, float]], spent: float) -> float | None:
    """The best value reached with at most ``spent`` slot-seconds (None: none reached yet)."""
    reached = [best for cost, best in curve if cost <= spent]
    return reached[-1] if reached else None


def _plot(curve: Sequence[tuple[float, float]], scale: float, unit: str, metric: str) -> Drawn:
    fig = _figure(7.5, 3.0)
    ax = fig.add_subplot()
    ax.step([c * scale for c, _b in curve], [b for _c, b in curve], where="post", color="#2ca02c", lw=2)
    ax.set_xlabel(f"spent ({unit})")
    ax.set_ylabel(f"best {metric} so far")
    return _drawn(fig)


def best_against_cost(data: CampaignData) -> Section:
    def build() -> tuple[str, str]:
        if data.spec.study.multi_objective:
            raise LeftOut("a multi-objective study has no single best value")
        curve = cost_curve(data.records(), maximizing(data.directions[0]))
        if not curve:
            raise LeftOut("no trial with a value has ended yet")
        cost = campaign_cost(
            data.spec.study, data.spec.trainer, data.trials, data.study.user_attrs.get(StudyAttr.SLOTS)
        )
        per_slot_second = cost.shown(1.0)
        total = curve[-1][0]
        reached = [(share, value_for_cost(curve, share * total)) for share in MARKS]
        rows = [
            (f"{share:.0%}", f"{cost.shown(share * total):.3g}", "-" if v is None else f"{v:.4g}")
            for share, v in reached
        ]
        unit = cost.shown_unit
        text = f"The best {data.metrics[0]} so far against the {unit} spent, trials in the order they ended."
        columns = ("share spent", unit, f"best {data.metrics[0]}")
        drawn = _plot(curve, per_slot_second, unit, data.metrics[0])
        body = figure(drawn, "best value against cost") + note(text) + table(columns, rows)
        return body, text + "\n\n" + md_table(columns, rows)

    return guard("Best value against cost", build)
