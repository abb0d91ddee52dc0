"""The report's "Cost and expected end" section: what the campaign cost (slot- or GPU-hours, and the budget left),
a cost column per trial, and the ends the controller expected along the way (``eta.jsonl``) against the actual end."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from search.loop.eta import EtaRun, duration_text, read_eta_runs
from search.reports.cost_status import campaign_cost
from search.reports.data import CampaignData
from search.reports.markup import LeftOut, Section, figure, guard, md_table, note, table
from search.reports.plots import Drawn, _drawn, _figure
from search.store.records import Files, StudyAttr, TrialRecord

__all__ = ["campaign_ends", "cost_and_end", "end_errors", "end_plot", "first_start", "run_ends"]

FRACTIONS = (0.25, 0.5, 0.75)  # of the campaign's time: where the expected end is compared with the actual one

Run = tuple[Sequence[Mapping[str, Any]], float]  # a run's expected ends (eta.jsonl's lines) and its actual end


def run_ends(runs: Sequence[EtaRun], finished: Sequence[float]) -> list[Run]:
    """Each run's expected ends with its actual end: the last trial end by the run's recorded end (the recorded end
    where none); unrecorded (a killed controller, an older file): the last trial end before the next run's first
    expected end, or the last of all for the last run. Runs with no end found are left out."""
    out: list[Run] = []
    for i, run in enumerate(runs):
        until = run.ended if run.ended is not None else runs[i + 1].lines[0]["time"] if i + 1 < len(runs) else None
        ends = [f for f in finished if until is None or f <= until]
        end = max(ends) if ends else run.ended
        if end is not None:
            out.append((run.lines, end))
    return out


def end_errors(runs: Sequence[Run], start: float, end: float) -> list[tuple[str, int, float, float, float]]:
    """At 25%, 50% and 75% of the campaign's time (``start`` to ``end``): (when, which run (0, 1, ...), the expected
    seconds left, the actual ones, the error as a share of the actual), from the first prediction made from then
    on, against the end of its own run."""
    lines = sorted(((line, i, run_end) for i, (run, run_end) in enumerate(runs) for line in run), key=_time)
    rows = []
    for fraction in FRACTIONS:
        at = start + fraction * (end - start)
        found = next(((line, i, e) for line, i, e in lines if line["time"] >= at), None)
        if found is not None and found[2] > found[0]["time"]:
            line, i, run_end = found
            actual = run_end - line["time"]
            rows.append((f"{fraction:.0%}", i, float(line["left"]), actual, abs(line["left"] - actual) / actual))
    return rows


def _time(item: tuple[Mapping[str, Any], int, float]) -> float:
    return float(item[0]["time"])


def end_plot(runs: Sequence[Run], start: float, end: float, word: str = "run") -> Drawn:
    """The expected end (its 90% band) at each moment it was worked out, and the actual end (dashed); with several
    runs (``word``: a sweep's rounds, a resumed campaign's runs), each run's expected ends apart, against its own
    end (dashed over the run's time), a dotted line where one run ends."""
    scale, unit = (3600.0, "h") if end - start > 3 * 3600 else (60.0, "min") if end - start > 180 else (1.0, "s")
    fig = _figure(7.5, 3.0)
    ax = fig.add_subplot()
    for i, (lines, run_end) in enumerate(runs):
        x = [(line["time"] - start) / scale for line in lines]
        low = [(line["time"] + line["low"] - start) / scale for line in lines]
        high = [(line["time"] + line["high"] - start) / scale for line in lines]
        if len(lines) > 1:
            ax.fill_between(x, low, high, color="#1f77b4", alpha=0.25, linewidth=0)
        else:  # one expected end: its interval as a bar
            ax.vlines(x, low, high, color="#1f77b4", alpha=0.25, linewidth=4)
        ax.plot(x, [(line["time"] + line["left"] - start) / scale for line in lines], color="#1f77b4", marker=".")
        y = (run_end - start) / scale
        if len(runs) == 1:
            ax.axhline(y, color="black", lw=0.8, ls="--")
        else:
            ax.hlines(y, x[0], y, color="black", lw=0.8, ls="--")  # from its first expected end to its end
            if i + 1 < len(runs):
                ax.axvline(y, color="grey", lw=0.6, ls=":")
    ax.set_xlabel(f"campaign time ({unit})")
    ax.set_ylabel(f"expected end ({unit})")
    ax.set_ylim(bottom=0)
    if len(runs) == 1:
        return _drawn(fig, ("expected end (band: 90%)", "actual end (dashed)"))
    legend = (f"expected end of its {word} (band: 90%)", f"the {word}'s actual end (dashed)", f"a {word} ends (dotted)")
    return _drawn(fig, legend)


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
        html, text = _expected_ends(data)
        body, md = body + html, md + text
        unit = f"cost ({cost.shown_unit})"
        body += "<details><summary>cost per trial</summary>" + table(("trial", "state", unit), rows) + "</details>"
        return body, md + "\n\n" + md_table(("trial", "state", unit), rows)

    return guard("Cost and expected end", build)


def campaign_ends(data: CampaignData) -> tuple[list[Run], float, float] | None:
    """The campaign's runs (their expected ends and actual ends: :func:`run_ends`), its start (the first trial's)
    and its end (the last trial's), as the section reads them (None: no expected end recorded or no trial ended)."""
    started = [first for r in data.records() if (first := first_start(r)) is not None]
    finished = [r.finished for r in data.records() if r.finished is not None]
    runs = run_ends(read_eta_runs(data.folder.root / Files.ETA_LOG), finished)
    if not (runs and started and finished):
        return None
    return runs, min(started), max(finished)


def first_start(record: TrialRecord) -> float | None:
    """When a trial's first run started: its record's ``started`` is its last run's (a trial that ran in segments,
    a promoted elastic trial or a PBT member, began its first one earlier; the campaign began with it)."""
    runs = [seg.get("runs") or () for seg in record.segments] + [record.pbt_segments]
    starts = [float(run[0]) for seg_runs in runs for run in seg_runs if len(run) == 3 and _number(run[0])]
    if record.started is not None:
        starts.append(record.started)
    return min(starts) if starts else None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _expected_ends(data: CampaignData) -> tuple[str, str]:
    """The expected ends drawn against the actual ones, and their errors at 25/50/75% (html, markdown; nothing
    before an expected end was recorded and a trial ended)."""
    found = campaign_ends(data)
    if found is None:
        return "", ""
    runs, start, end = found
    word = "round" if data.spec.scaling is not None and data.spec.scaling.lr_grid else "run"
    said = f"The end expected along the way ({sum(len(lines) for lines, _e in runs)} times), against the actual end."
    if len(runs) > 1:
        said += (
            f" Each of the {len(runs)} {word}s is a campaign of its own: its expected end is its own {word}'s, drawn "
            f"against that {word}'s end."
        )
    several = len(runs) > 1
    shown = [
        (w, *((str(i),) if several else ()), duration_text(left), duration_text(actual), f"{err:.0%}")
        for w, i, left, actual, err in end_errors(runs, start, end)
    ]
    columns = ("at", *((word,) if several else ()), "expected left", "actual left", "error")
    html = figure(end_plot(runs, start, end, word), "expected end against the actual end") + note(said)
    return html + table(columns, shown), "\n\n" + said + "\n\n" + md_table(columns, shown)
