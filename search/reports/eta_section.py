"""The report's "Cost and expected end" section: what the campaign cost (slot- or GPU-hours, and the budget left),
a cost column per trial, and the ends the controller expected along the way (``eta.jsonl``) against the actual end."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from search.loop.eta import duration_text, read_eta_log
from search.reports.cost_status import campaign_cost
from search.reports.data import CampaignData
from search.reports.markup import LeftOut, Section, figure, guard, md_table, note, table
from search.reports.plots import Drawn, _drawn, _figure
from search.store.records import Files, StudyAttr

__all__ = ["cost_and_end", "end_errors", "end_plot"]

FRACTIONS = (0.25, 0.5, 0.75)  # of the campaign's time: where the expected end is compared with the actual one


def end_errors(lines: Sequence[Mapping[str, Any]], start: float, end: float) -> list[tuple[str, float, float, float]]:
    """At 25%, 50% and 75% of the campaign's time: (when, the expected seconds left, the actual ones, the error as a
    share of the actual), from the first prediction made from then on."""
    rows = []
    for fraction in FRACTIONS:
        at = start + fraction * (end - start)
        line = next((x for x in lines if x["time"] >= at), None)
        if line is not None and end > line["time"]:
            actual = end - line["time"]
            rows.append((f"{fraction:.0%}", float(line["left"]), actual, abs(line["left"] - actual) / actual))
    return rows


def end_plot(lines: Sequence[Mapping[str, Any]], start: float, end: float) -> Drawn:
    """The expected end (its 90% band) at each moment it was worked out, and the actual end (dashed)."""
    scale, unit = (3600.0, "h") if end - start > 3 * 3600 else (60.0, "min") if end - start > 180 else (1.0, "s")
    fig = _figure(7.5, 3.0)
    ax = fig.add_subplot()
    x = [(line["time"] - start) / scale for line in lines]
    ax.fill_between(
        x,
        [(line["time"] + line["low"] - start) / scale for line in lines],
        [(line["time"] + line["high"] - start) / scale for line in lines],
        color="#1f77b4",
        alpha=0.25,
        linewidth=0,
    )
    ax.plot(x, [(line["time"] + line["left"] - start) / scale for line in lines], color="#1f77b4", marker=".")
    ax.axhline((end - start) / scale, color="black", lw=0.8, ls="--")
    ax.set_xlabel(f"campaign time ({unit})")
    ax.set_ylabel(f"expected end ({unit})")
    ax.set_ylim(bottom=0)
    return _drawn(fig, ("expected end (band: 90%)", "actual end (dashed)"))


def cost_and_end(data: CampaignData) -> Section:
    def build() -> tuple[str, str]:
        if not data.trials:
            raise LeftOut("no trial yet")
        cost = campaign_cost(
            data.spec.study, data.spec.trainer, data.trials, data.study.user_attrs.get(StudyAttr.SLOTS)
        )
        text = " ".join(line.strip() for line in cost.lines()[:1]) + "."
        records = [(r.number, r.state.name, (r.duration or 0.0) * (r.width or 1)) for r in data.records()]
        rows = [(n, state, f"{cost.shown(slot_seconds):.3g}") for n, state, slot_seconds in records]
        body, md = note(text), text
        lines = read_eta_log(data.folder.root / Files.ETA_LOG)
        started = [r.started for r in data.records() if r.started is not None]
        finished = [r.finished for r in data.records() if r.finished is not None]
        if lines and started and finished:
            start, end = min(started), max(finished)
            errors = end_errors(lines, start, end)
            said = f"The end expected along the way ({len(lines)} times), against the actual end."
            body += figure(end_plot(lines, start, end), "expected end against the actual end") + note(said)
            shown = [(w, duration_text(left), duration_text(actual), f"{err:.0%}") for w, left, actual, err in errors]
            columns = ("at", "expected left", "actual left", "error")
            body += table(columns, shown)
            md += "\n\n" + said + "\n\n" + md_table(columns, shown)
        unit = f"cost ({cost.shown_unit})"
        body += "<details><summary>cost per trial</summary>" + table(("trial", "state", unit), rows) + "</details>"
        return body, md + "\n\n" + md_table(("trial", "state", unit), rows)

    return guard("Cost and expected end", build)
