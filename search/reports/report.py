"""``hypersweep report``: one self-contained study report per campaign.

Writes ``report/index.html`` (every figure embedded as a PNG data URI, inline
CSS, no script, no network), ``report/report.md``, ``report/trials.csv`` and
``report/trials.parquet``. Every section is an element with a stable id
(:data:`SECTION_IDS`); every piece of user text is escaped. A section with
nothing to show is left out (and from the table of contents); one line under
the contents names the sections left out and why.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from search.reports import (
    architectures,
    branching_section,
    cost_value,
    elastic_section,
    eta_section,
    pbt_section,
    run_sections,
    scaling_section,
    sections,
)
from search.reports.data import CampaignData, load_campaign, report_frame
from search.reports.markup import Section, e
from search.store.folder import replaced_atomically, write_atomic
from search.store.records import Files
from search.store.trial_reports import restore_metrics_files
from search.vocab.registry import Registry

__all__ = ["SECTION_REGISTRY", "SECTION_IDS", "ReportFiles", "write_report", "build_sections", "Section"]

#: Every section of the report, in page order: its id (the element's id, stable) -> its builder.
SECTION_REGISTRY: Registry[Callable[[CampaignData], Section]] = Registry("report section")
for _id, _builder, _line in (
    ("spec", sections.spec, "the question, the searched space and the frozen spec"),
    ("best", sections.best, "the best trials and their settings (the Pareto front of a multi-objective study)"),
    ("pareto", sections.pareto, "the Pareto front of a multi-objective study, drawn"),
    ("architectures", architectures.architectures, "the best trials' architectures, drawn"),
    ("scaling", scaling_section.scaling, "the batch-size scaling sweep: steps to target, the critical batch"),
    ("branching", branching_section.branching, "the critical batch size over training, from branches off one run"),
    ("pbt", pbt_section.pbt_section, "the population-based training lineage"),
    ("lr", sections.lr, "the learning-rate schedules of the best trials"),
    ("history", sections.history, "the objective over the trials, with the best so far (one objective)"),
    ("curves", sections.curves, "the learning curves the trials reported"),
    ("importance", sections.importance, "which parameters mattered (Optuna's importances)"),
    ("pruning", sections.pruning, "what the pruner stopped, and when"),
    ("timeline", run_sections.timeline_section, "when each trial ran, on which worker"),
    (
        "elastic",
        elastic_section.elastic_section,
        "each resized trial's segments: width, batch, lr, throughput, goodput",
    ),
    ("cost", eta_section.cost_and_end, "what the campaign cost, per trial too, and the end expected along the way"),
    ("cost_value", cost_value.best_against_cost, "the best value so far against the slot- or GPU-hours spent"),
    ("failures", run_sections.failures, "the failed trials and why"),
    ("environment", run_sections.environment, "the software and machines the campaign ran on"),
    ("reproduce", run_sections.reproduce, "the commands that re-run a trial"),
):
    SECTION_REGISTRY.add(_id, _builder, _line)
SECTION_IDS = SECTION_REGISTRY.names()


@dataclasses.dataclass(frozen=True)
class ReportFiles:
    index: Path
    markdown: Path
    csv: Path
    parquet: Path


def write_report(path: str | Path) -> ReportFiles:
    """Render the campaign in ``path`` into ``path/report/``."""
    data = load_campaign(path)
    restore_metrics_files(data.trials, data.folder)  # a fault may have lost some: the study has them
    out = data.folder.report
    out.mkdir(parents=True, exist_ok=True)
    built = build_sections(data)
    files = ReportFiles(
        out / Files.REPORT_HTML, out / Files.REPORT_MARKDOWN, out / Files.REPORT_CSV, out / Files.REPORT_PARQUET
    )
    frame = report_frame(data)
    _write_frame(frame, files.csv, lambda f, p: f.to_csv(p, index=False))
    _write_frame(_parquet_safe(frame), files.parquet, lambda f, p: f.to_parquet(p, index=False))
    write_atomic(files.markdown, _markdown(data, built))
    write_atomic(files.index, _html_page(data, built))
    return files


def _write_frame(frame: pd.DataFrame, path: Path, write: Callable[[pd.DataFrame, Path], None]) -> None:
    with replaced_atomically(path) as tmp:
        write(frame, tmp)


def _parquet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """Columns of mixed Python types (a categorical of numbers and strings) become strings."""
    frame = frame.copy()
    for column in frame.columns:
        if frame[column].dtype == object:
            kinds = {type(v) for v in frame[column] if v is not None and not (isinstance(v, float) and math.isnan(v))}
            if len(kinds) > 1 or (kinds and not kinds <= {str}):
                frame[column] = [None if v is None else str(v) for v in frame[column]]
    return frame


def build_sections(data: CampaignData) -> list[Section]:
    """Every section in :data:`SECTION_IDS` order, those left out included (``Section.omitted`` says why)."""
    return [dataclasses.replace(build(data), id=name) for name, build in SECTION_REGISTRY.items()]


# --- the page ----------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:0 auto;max-width:1100px;
padding:1em 2em;color:#222;line-height:1.4}
h1{margin-bottom:.2em}nav a{margin-right:.8em;font-size:.9em}section{border-top:1px solid #ddd;margin-top:1.5em}
.wide{max-width:100%;overflow-x:auto;margin:.6em 0}.wide table{margin:0}
table{border-collapse:collapse;margin:.6em 0;font-size:.85em}th,td{border:1px solid #ccc;padding:.25em .5em;
text-align:left;vertical-align:top}th{background:#f3f3f3}table.kv td:first-child{font-weight:600;white-space:nowrap}
table.kv td:last-child{overflow-wrap:anywhere}.long{display:inline-block;min-width:16em;max-width:30em}
pre{background:#f7f7f7;padding:.6em;overflow-x:auto;font-size:.8em;white-space:pre-wrap}
figure{margin:.6em 0}img{max-width:100%}.note{color:#555;font-style:italic}.question{font-size:1.1em}
figcaption{font-size:.8em;color:#444}
"""


def _left_out(built: Sequence[Section]) -> list[tuple[str, str]]:
    return [(s.title, s.omitted) for s in built if not s.shown]


def _html_page(data: CampaignData, built: Sequence[Section]) -> str:
    title = f"hypersweep report: {data.spec.study.name}"
    shown = [s for s in built if s.shown]
    nav = "".join(f'<a href="#{s.id}">{e(s.title)}</a>' for s in shown)
    body = "".join(f'<section id="{s.id}"><h2>{e(s.title)}</h2>{s.html}</section>' for s in shown)
    omitted = "".join(f"<li><b>{e(title)}</b>: {e(why)}</li>" for title, why in _left_out(built))
    if omitted:
        nav += f'<div id="left-out" class="note">Left out, nothing to show:<ul>{omitted}</ul></div>'
    made = time.strftime("%Y-%m-%d %H:%M:%S")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)}</title><style>{_CSS}</style></head><body>"
        f'<h1>{e(title)}</h1><p class="note">rendered {e(made)} from {e(data.folder.root)}; '
        f"{len(data.trials)} trials</p><nav>{nav}</nav>{body}</body></html>\n"
    )


def _markdown(data: CampaignData, built: Sequence[Section]) -> str:
    parts = [f"# hypersweep report: {data.spec.study.name}\n", f"{len(data.trials)} trials; figures in index.html.\n"]
    omitted = _left_out(built)
    if omitted:
        parts.append("Left out, nothing to show:\n\n" + "".join(f"- {title}: {why}\n" for title, why in omitted))
    parts += [f"## {s.title}\n\n{s.md.strip()}\n" for s in built if s.shown]
    return "\n".join(parts)
