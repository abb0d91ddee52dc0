"""The report's branching section: the critical batch size at each point of one run beside the noise scale there,
the batch-size schedule it gives, and the scheduled run against the fixed-batch run.

Everything comes from the ``[scaling.branching]`` study's folder (``branching/``: ``summary.json``,
``critical.csv``, ``critical.png``, written by :mod:`search.session.branching`); nothing is measured again here.
"""

from __future__ import annotations

import base64
import csv
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from search.reports.data import CampaignData
from search.reports.markup import LeftOut, Section, e, figure, guard, md_table, note, table
from search.store.records import Files

__all__ = ["branching", "step_saving", "summary_lines"]

RUNS = (("fixed", "fixed batch (the reference)"), ("scheduled", "the schedule"), ("fixed_last", "last batch from 0"))


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else math.nan


def _whole(value: float) -> str:
    return f"{value:,.0f}" if math.isfinite(value) else "-"


def _noise(value: float) -> str:
    return f"{value:,.3g}" if math.isfinite(value) else "-"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2g}" if math.isfinite(a) and math.isfinite(b) and b > 0 else "-"


def step_saving(summary: Mapping[str, Any]) -> str:
    """The schedule's saving in steps at equal examples: one sentence (what the runs' last reports say)."""
    fixed, scheduled = summary.get("fixed") or {}, summary.get("scheduled") or {}
    f_steps, s_steps = _number(fixed.get("final_steps")), _number(scheduled.get("final_steps"))
    f_ex, s_ex = _number(fixed.get("final_examples")), _number(scheduled.get("final_examples"))
    if not all(math.isfinite(v) for v in (f_steps, s_steps, f_ex, s_ex)) or f_steps <= 0:
        return "The runs did not report their steps and examples: no saving can be read."
    equal = "the same" if f_ex == s_ex else f"{_whole(s_ex)} against {_whole(f_ex)}"
    saving = 1 - s_steps / f_steps
    f_loss, s_loss = _number(fixed.get("final_val_loss")), _number(scheduled.get("final_val_loss"))
    loss = f"; validation loss {s_loss:.4g} against {f_loss:.4g}" if math.isfinite(f_loss * s_loss) else ""
    if saving <= 0:
        return f"No saving: the scheduled run took {_whole(s_steps)} steps, the fixed run {_whole(f_steps)} ({equal} examples{loss})."
    return (
        f"The schedule saves {saving:.0%} of the steps at equal examples: {_whole(s_steps)} steps against "
        f"{_whole(f_steps)} at a fixed batch ({equal} examples{loss})."
    )


def _points(rows: list[dict[str, str]]) -> tuple[list[str], list[tuple[object, ...]]]:
    columns = ["epoch (point)", "critical batch", "B_simple there", "critical / B_simple", "tuned rate at a grid end"]
    out: list[tuple[object, ...]] = []
    for r in rows:
        crit, noise = float(r["critical_batch"]), float(r["b_simple"] or "nan")
        edge = ", ".join((r.get("rate_at_grid_edge") or "").split()) or "-"
        out.append((int(r["point"]), int(crit), _noise(noise), _ratio(crit, noise), edge))
    return columns, out


def _runs(summary: Mapping[str, Any]) -> tuple[list[str], list[tuple[object, ...]]]:
    columns = ["run", "steps to target", "examples to target", "steps at the end", "examples", "val loss", "val acc"]
    rows: list[tuple[object, ...]] = []
    for key, name in RUNS:
        r = summary.get(key) or {}
        loss, acc = _number(r.get("final_val_loss")), _number(r.get("final_val_accuracy"))
        rows.append(
            (
                name,
                _whole(_number(r.get("steps"))) if math.isfinite(_number(r.get("steps"))) else "not reached",
                _whole(_number(r.get("examples"))),
                _whole(_number(r.get("final_steps"))),
                _whole(_number(r.get("final_examples"))),
                f"{loss:.4g}" if math.isfinite(loss) else "-",
                f"{acc:.4g}" if math.isfinite(acc) else "-",
            )
        )
    return columns, rows


def _schedule(summary: Mapping[str, Any]) -> str:
    steps = summary.get("schedule") or []
    return ", ".join(f"from epoch {s['from_epoch']}: B={s['batch_size']} at lr {s['lr']:.3g}" for s in steps)


def branching(data: CampaignData) -> Section:
    def build() -> tuple[str, str]:
        folder = data.folder.branching
        path = folder / Files.BRANCHING_SUMMARY
        if not path.exists():
            raise LeftOut(f"no branching study ({Files.BRANCHING}/{Files.BRANCHING_SUMMARY} absent)")
        summary = json.loads(path.read_text())
        with open(folder / "critical.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        eps = _number(summary.get("epsilon"))
        body = note(
            f"branches off one run's checkpoints; the critical batch at a point is the largest batch whose tuned "
            f"validation loss is within {eps:.3g} (relative) of the best there; B_simple is the reference run's "
            f"gradient noise scale at that point (-: no estimate there, not measured or not positive)"
        )
        md = ""
        columns, cells = _points(rows)
        body += "<h3>Critical batch at each point</h3>" + table(columns, cells)
        md += md_table(columns, cells) + "\n\n"
        saving = step_saving(summary)
        schedule = _schedule(summary)
        body += f"<h3>The schedule and its runs</h3><p>Schedule: {e(schedule)}.</p><p><b>{e(saving)}</b></p>"
        md += f"Schedule: {schedule}.\n\n**{saving}**\n\n"
        columns, cells = _runs(summary)
        body += table(columns, cells)
        md += md_table(columns, cells) + "\n\n"
        png = folder / "critical.png"
        if png.exists():
            uri = "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")
            body += figure(uri, "critical batch and B_simple at each point, the schedule's batch as steps")
            md += f"- figure {Files.BRANCHING}/critical.png (embedded in index.html)\n"
        return body, md

    return guard("Critical batch over training (branching)", build)


def summary_lines(folder: Path) -> str:
    """The study's end-of-run lines for the terminal: the critical batch (B_simple) at each point, the schedule,
    the saving in steps ("" without ``summary.json``)."""
    path = folder / Files.BRANCHING_SUMMARY
    if not path.exists():
        return ""
    summary = json.loads(path.read_text())
    noise = summary.get("b_simple") or {}
    points = ", ".join(
        f"epoch {p}: {c} (B_simple {_noise(_number(noise.get(p)))})" for p, c in (summary.get("critical") or {}).items()
    )
    schedule = ", ".join(f"{s['from_epoch']}: B={s['batch_size']}" for s in summary.get("schedule") or [])
    return (
        f"Critical batch over training (branching, epsilon {_number(summary.get('epsilon')):g}): {points}\n"
        f"schedule (from epoch: batch): {schedule}. {step_saving(summary)}\n"
        f"tables and plot: {os.path.relpath(folder)}\n\n"
    )
