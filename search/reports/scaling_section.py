"""The report's batch-size scaling section: the conclusion, the table, the trials short of the target, the figures.

Everything comes from the campaign's ``scaling/`` folder (written by the sweep's
analysis) and the trials' records; nothing is refitted here, so the page says
exactly what ``conclusion.txt`` and ``scaling.csv`` say.
"""

from __future__ import annotations

import base64
import math

import pandas as pd

from search.reports.data import CampaignData
from search.reports.markup import LeftOut, Section, e, figure, guard, md_table, note, table
from search.store.records import Files
from search.vocab.terms import maximizing

__all__ = ["scaling", "FIGURE_CAPTIONS"]

FIGURE_CAPTIONS = {
    "steps_to_target.png": "steps to target per batch size (measured points, the fit, regimes shaded, interval band)",
    "examples_to_target.png": "examples to target per batch size, with the fit",
    "lr_rule.png": "the best learning rate per batch size against the linear and square-root rules",
    "lr_grid.png": "steps to target against the learning rate, per batch size (lr_grid: each best rate ringed)",
    "noise_scale.png": "gradient noise scale B_simple over training of each batch size's best trial, with intervals",
    "noise_vs_b_crit.png": (
        "B_crit (fit of steps to target) with its interval and the factor-of-2 band, against B_simple "
        "averaged over each batch size's best run (bars: the mean of its readings' interval ends)"
    ),
}


def _short_of_target(data: CampaignData) -> tuple[list[str], list[tuple[object, ...]]]:
    """The complete trials that never reached the target, with their outcome and the best value they got to."""
    sweep = data.sweep
    columns = ["trial", "batch size", "outcome", f"best {sweep.goal.metric}" if sweep else "best", "steps run", "lr"]
    if sweep is None:
        return columns, []
    rows: list[tuple[object, ...]] = []
    for number in sorted(set(sweep.outcomes) - sweep.reached):
        record = data.record(number)
        values = [m[sweep.goal.metric] for _s, m in record.history if sweep.goal.metric in m]
        best = (max if maximizing(sweep.goal.mode) else min)(values) if values else None
        steps = record.history[-1][1].get("steps") if record.history else None
        rows.append((number, sweep.batch[number], sweep.outcomes[number].value, best, steps, record.params.get("lr")))
    return columns, rows


def _short(value: object) -> object:
    """A table number to 4 significant figures, or whole from 1,000 up (the CSV keeps it all); anything else as
    it is."""
    if isinstance(value, float) and math.isfinite(value) and not value.is_integer():
        return float(f"{value:.4g}") if abs(value) < 1000 else round(value)
    return value


def scaling(data: CampaignData) -> Section:
    def build() -> tuple[str, str]:
        if data.scaling_dir is None:
            raise LeftOut("no batch-size scaling results (no scaling/ folder)")
        body, md = "", ""
        conclusion = data.scaling_dir / Files.SCALING_CONCLUSION
        if conclusion.exists():
            text = conclusion.read_text().strip()
            body += f'<h3>Conclusion</h3><p class="conclusion">{e(text)}</p>'
            md += f"**Conclusion.** {text}\n\n"
        csv = data.scaling_dir / Files.SCALING_TABLE
        if csv.exists():
            frame = pd.read_csv(csv)
            rows = [tuple(_short(v) for v in row) for row in frame.itertuples(index=False, name=None)]
            body += "<h3>Per batch size</h3>" + table(list(frame.columns), rows)
            body += note(
                f"numbers to 4 significant figures (whole from 1,000 up); {Files.SCALING}/{Files.SCALING_TABLE} holds them in full"
            )
            md += md_table(list(frame.columns), rows) + "\n\n"
        else:
            body += note(f"{Files.SCALING}/ holds no {Files.SCALING_TABLE}")
        if data.sweep is not None:
            columns, rows = _short_of_target(data)
            counts = data.sweep.counts_text()
            body += "<h3>Trials short of the target</h3>" + note(
                counts + ("; each is told twice the steps it ran, and is not ranked" if rows else "")
            )
            md += counts + "\n\n"
            if rows:
                body += table(columns, rows)
                md += md_table(columns, rows) + "\n\n"
        order = list(FIGURE_CAPTIONS)
        for png in sorted(
            data.scaling_dir.glob("*.png"),
            key=lambda p: (order.index(p.name) if p.name in order else len(order), p.name),
        ):
            uri = "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")
            body += figure(uri, FIGURE_CAPTIONS.get(png.name, f"scaling figure {png.name}"))
            md += f"- figure scaling/{png.name} (embedded in index.html)\n"
        return body, md

    return guard("Batch-size scaling", build)
