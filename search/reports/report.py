"""``hypersweep report``: one self-contained study report per campaign.

Writes ``report/index.html`` (every figure embedded as a PNG data URI, inline
CSS, no script, no network), ``report/report.md``, ``report/trials.csv`` and
``report/trials.parquet``. Every section is an element with a stable id
(:data:`SECTION_IDS`); every piece of user text is escaped.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import json
import math
import os
import shlex
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from search.reports import plots
from search.store.folder import write_atomic
from search.store.records import Files, spec_sha256_of
from search.reports.data import (
    CampaignData,
    epochs_spent,
    genome_of,
    history_of,
    importances,
    load_campaign,
    lr_schedule_points,
    report_frame,
    slot_count,
    timeline,
    utilization,
)

__all__ = ["SECTION_IDS", "ReportFiles", "write_report", "build_sections", "Section"]

SECTION_IDS = (
    "spec", "best", "history", "curves", "importance", "pruning", "timeline",
    "pareto", "scaling", "failures", "environment", "reproduce",
)  # fmt: skip
MAX_CURVE_TRIALS = 60
MAX_TRACEBACK = 4000


@dataclasses.dataclass(frozen=True)
class Section:
    """One section of the report, as HTML and as Markdown."""

    id: str
    title: str
    html: str
    md: str


@dataclasses.dataclass(frozen=True)
class ReportFiles:
    index: Path
    markdown: Path
    csv: Path
    parquet: Path


def write_report(path: str | Path) -> ReportFiles:
    """Render the campaign in ``path`` into ``path/report/``."""
    data = load_campaign(path)
    out = data.folder.report
    out.mkdir(parents=True, exist_ok=True)
    sections = build_sections(data)
    files = ReportFiles(out / Files.REPORT_HTML, out / Files.REPORT_MARKDOWN, out / Files.REPORT_CSV,
                        out / Files.REPORT_PARQUET)
    frame = report_frame(data)
    _write_frame(frame, files.csv, lambda f, p: f.to_csv(p, index=False))
    _write_frame(_parquet_safe(frame), files.parquet, lambda f, p: f.to_parquet(p, index=False))
    write_atomic(files.markdown, _markdown(data, sections))
    write_atomic(files.index, _html_page(data, sections))
    return files


def _write_frame(frame: pd.DataFrame, path: Path, write: Callable[[pd.DataFrame, Path], None]) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    write(frame, tmp)
    os.replace(tmp, path)


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
    builders = {
        "spec": _spec, "best": _best, "history": _history, "curves": _curves, "importance": _importance,
        "pruning": _pruning, "timeline": _timeline, "pareto": _pareto, "scaling": _scaling,
        "failures": _failures, "environment": _environment, "reproduce": _reproduce,
    }  # fmt: skip
    return [builders[key](data) for key in SECTION_IDS]


# --- small HTML / Markdown helpers -------------------------------------------------------------


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.6g}"
    return str(value)


def _table(columns: Sequence[str], rows: Iterable[Sequence[Any]], cls: str = "") -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    thead = f"<thead><tr>{head}</tr></thead>" if any(columns) else ""
    body = "".join("<tr>" + "".join(f"<td>{_e(_fmt(v))}</td>" for v in row) + "</tr>" for row in rows)
    klass = f' class="{_e(cls)}"' if cls else ""
    return f"<table{klass}>{thead}<tbody>{body}</tbody></table>"


def _md_table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        return _fmt(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _figure(uri: str, alt: str) -> str:
    return f'<figure><img src="{uri}" alt="{_e(alt)}"></figure>'


def _note(text: str) -> str:
    return f'<p class="note">{_e(text)}</p>'


def _kv(pairs: Sequence[tuple[str, Any]]) -> tuple[str, str]:
    return _table(("", ""), pairs, "kv"), _md_table(("key", "value"), pairs)


def _guard(section_id: str, title: str, build: Callable[[], tuple[str, str]]) -> Section:
    """A section whose figures or numbers fail to build still renders, with the error as a note."""
    try:
        body, md = build()
    except Exception as exc:  # noqa: BLE001 - one broken figure must not cost the whole report
        text = f"this section could not be drawn: {type(exc).__name__}: {exc}"
        body, md = _note(text), text
    return Section(section_id, title, body, md)


# --- sections ----------------------------------------------------------------------------------


def _question(data: CampaignData) -> str:
    s = data.spec
    goals = " and ".join(f"{d} {m}" for d, m in zip(s.study.directions, s.study.metrics, strict=True))
    searched = ", ".join(s.space.distributions()) or "no parameters"
    return (
        f"Which settings of {searched} {goals} for the trainer {s.trainer.entry} on {s.trainer.dataset!r} "
        f"({s.trainer.epochs} epochs per trial), within {s.study.n_trials} trials of the {s.study.sampler} sampler?"
    )


def _spec_comment(text: str) -> str:
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# ").rstrip())
    return "\n".join(lines).strip()


def _spec(data: CampaignData) -> Section:
    s = data.spec
    recorded = spec_sha256_of(data.study)
    check = "matches the study's record" if recorded == s.sha256 else f"DIFFERS from the study's record {recorded}"
    pairs = [
        ("study", s.study.name), ("spec sha256", f"{s.sha256} ({check})"),
        ("objective", ", ".join(f"{d} {m}" for d, m in zip(s.study.directions, s.study.metrics, strict=True))),
        ("sampler", s.study.sampler), ("pruner", s.study.pruner), ("trials (budget)", s.study.n_trials),
        ("study seed", s.study.seed), ("deterministic", s.study.deterministic),
        ("trainer", s.trainer.entry), ("dataset", s.trainer.dataset), ("epochs per trial", s.trainer.epochs),
        ("device", s.trainer.device),
    ]  # fmt: skip
    kv_html, kv_md = _kv(pairs)
    space = [(name, repr(dist)) for name, dist in s.space.distributions().items()]
    comment = _spec_comment(s.text)
    body = (
        f'<p class="question">{_e(_question(data))}</p>'
        + (f"<p>{_e(comment)}</p>" if comment else "")
        + kv_html
        + "<h3>Search space</h3>" + _table(("parameter", "distribution"), space)
        + f"<details><summary>frozen spec.toml</summary><pre>{_e(s.text)}</pre></details>"
    )  # fmt: skip
    md = (
        f"**Question.** {_question(data)}\n\n" + (f"{comment}\n\n" if comment else "") + kv_md
        + "\n\nSearch space:\n\n" + _md_table(("parameter", "distribution"), space)
        + f"\n\n```toml\n{s.text.rstrip()}\n```"
    )  # fmt: skip
    return Section("spec", "The question and the spec", body, md)


def _best(data: CampaignData) -> Section:
    def build() -> tuple[str, str]:
        best = data.best()
        if not best:
            return _note("no complete trial yet"), "No complete trial yet."
        names = sorted({k for t in best for k in t.params})
        has_genome = any(genome_of(t) for t in best)
        columns = ["rank", "trial", *data.metrics, "seed", "epochs", "duration s", *names]
        columns += ["genome"] if has_genome else []
        rows = []
        for rank, t in enumerate(best, 1):
            r = data.record(t)
            row = [rank, r.number, *(r.values or []), r.seed, epochs_spent(r), r.duration,
                   *(r.params.get(n) for n in names)]
            rows.append(row + ([genome_of(r)] if has_genome else []))
        label = "Pareto front" if data.spec.study.multi_objective else f"the {len(best)} best complete trials"
        body = f"<p>{_e(label)}</p>" + _table(columns, rows)
        curves = {t.number: lr_schedule_points(t) for t in best[:5]}
        if any(a or b for a, b in curves.values()):
            body += _figure(plots.lr_schedules(curves), "learning-rate schedule of the best trials")
        else:
            body += _note("the best trials recorded no learning rate (no 'lr' metric, no lr/schedule params)")
        return body, f"{label}:\n\n" + _md_table(columns, rows)

    return _guard("best", "Best trials", build)


def _history(data: CampaignData) -> Section:
    def build() -> tuple[str, str]:
        done = data.complete()
        if not done:
            return _note("no complete trial yet"), "No complete trial yet."
        origin = min((r.started for r in data.records() if r.started is not None), default=0.0)
        ends = [data.record(t).finished for t in done]
        body, md = "", ""
        for i, (metric, direction) in enumerate(zip(data.metrics, data.directions, strict=True)):
            finished = [(origin if end is None else end) - origin for end in ends]
            uri = plots.optimization_history([t.number for t in done], [t.values[i] for t in done], finished,
                                             direction == "maximize", metric)
            body += _figure(uri, f"optimization history of {metric}")
            md += f"- {metric}: {len(done)} complete trials, best {_fmt(_best_value(done, i, direction))}\n"
        return body, md

    return _guard("history", "Optimization history and best so far against wall time", build)


def _best_value(trials: Sequence[Any], i: int, direction: str) -> float:
    values = [t.values[i] for t in trials]
    return max(values) if direction == "maximize" else min(values)


def _curves(data: CampaignData) -> Section:
    def build() -> tuple[str, str]:
        curves = {r.number: (r.state.name, history_of(r)) for r in data.records() if r.history}
        if not curves:
            return _note("no trial reported yet"), "No trial reported yet."
        shown = dict(sorted(curves.items())[:MAX_CURVE_TRIALS])
        reported = {k for _s, h in shown.values() for _step, m in h for k in m}
        extra = [m for m in ("train_loss", "val_loss") if m in reported and m not in data.metrics]
        metrics = [m for m in data.metrics if m in reported] + extra
        if not metrics:
            return _note("the trials reported none of the study's metrics"), "No metric to draw."
        note = f" (the first {MAX_CURVE_TRIALS} of {len(curves)})" if len(curves) > MAX_CURVE_TRIALS else ""
        body = _figure(plots.learning_curves(shown, metrics), "learning curves") + _note(
            f"{len(shown)} trials{note}, coloured by final state"
        )
        return body, f"Learning curves of {len(shown)} trials for {', '.join(metrics)} (figure in index.html)."

    return _guard("curves", "Learning curves", build)


def _importance(data: CampaignData) -> Section:
    def build() -> tuple[str, str]:
        values, note = importances(data)
        body, md = "", ""
        for metric, scores in values.items():
            body += _figure(plots.importance_bars(scores, metric), f"parameter importances for {metric}")
            body += _table(("parameter", f"importance ({metric})"), scores.items())
            md += f"{metric}:\n\n" + _md_table(("parameter", "importance"), scores.items()) + "\n\n"
        if note:
            body += _note(f"Optuna's importances could not be computed: {note}")
            md += f"Optuna's importances could not be computed: {note}\n"
        return body, md

    return _guard("importance", "Parameter importances (Optuna)", build)


def _pruning(data: CampaignData) -> Section:
    def build() -> tuple[str, str]:
        counts = data.counts()
        per_state: dict[str, list[float]] = {}
        reasons: dict[str, int] = {}
        for r in data.records():
            per_state.setdefault(r.state.name, []).append(epochs_spent(r))
            if r.stop_reason:
                reasons[r.stop_reason] = reasons.get(r.stop_reason, 0) + 1
        total = sum(sum(v) for v in per_state.values())
        budget = data.spec.trainer.epochs * len(data.trials)
        rows = [(state, counts.get(state, len(e)), sum(e)) for state, e in sorted(per_state.items())]
        rows.append(("total", len(data.trials), total))
        saved = f"{budget - total:g} of {budget:g} epochs ({(budget - total) / budget:.0%})" if budget else "n/a"
        text = f"pruner {data.spec.study.pruner}; epochs not trained thanks to early stopping: {saved}"
        body = _note(text) + _table(("state", "trials", "epochs trained"), rows)
        if reasons:
            body += "<h3>Stop reasons</h3>" + _table(("reason", "trials"), sorted(reasons.items()))
        bars = [(r.number, epochs_spent(r), r.state.name) for r in data.records()]
        if bars:
            body += _figure(plots.epochs_bars(bars, data.spec.trainer.epochs), "epochs trained per trial")
        return body, text + "\n\n" + _md_table(("state", "trials", "epochs trained"), rows)

    return _guard("pruning", "Pruning and epochs spent", build)


def _timeline(data: CampaignData) -> Section:
    def build() -> tuple[str, str]:
        spans = timeline(data.records())
        if not spans:
            return _note("no trial recorded its start and end times"), "No timing recorded."
        use = utilization(spans, slot_count(data.environment, spans))
        share = use["utilization"]
        text = (f"{len(spans)} trials on {len(use['per_worker'])} worker(s), {use['slots']} slot(s); "
                f"busy {use['busy_s']:.1f} s of {use['slots']} x {use['span_s']:.1f} s: utilization "
                + (f"{share:.0%}" if share is not None else "n/a"))  # fmt: skip
        rows = [(w, f"{u:.0%}" if u is not None else "n/a") for w, u in use["per_worker"].items()]
        body = _note(text) + _figure(plots.gantt(spans), "trials per worker over time")
        body += _table(("worker", "busy share of the span"), rows)
        return body, text + "\n\n" + _md_table(("worker", "busy share"), rows)

    return _guard("timeline", "Worker and GPU timeline", build)


def _pareto(data: CampaignData) -> Section:
    def build() -> tuple[str, str]:
        if not data.spec.study.multi_objective:
            text = "single-objective study: no Pareto front"
            return _note(text), text + "."
        front = data.study.best_trials
        names = data.metrics
        rows = [(t.number, *t.values, *t.params.values()) for t in sorted(front, key=lambda t: t.values[0])]
        columns = ["trial", *names, *(front[0].params if front else [])]
        body = _table(columns, rows)
        if len(names) >= 2 and data.complete():
            points = [(t.values[0], t.values[1]) for t in data.complete()]
            body = _figure(plots.pareto(points, [(t.number, t.values[0], t.values[1]) for t in front], names),
                           "Pareto front") + body
        return body, _md_table(columns, rows)

    return _guard("pareto", "Pareto front", build)


def _scaling(data: CampaignData) -> Section:
    def build() -> tuple[str, str]:
        if data.scaling_dir is None:
            text = "this campaign has no batch-size scaling results (no scaling/ folder)"
            return _note(text), text + "."
        body, md = "", ""
        csv = data.scaling_dir / Files.SCALING_TABLE
        if csv.exists():
            frame = pd.read_csv(csv)
            rows = frame.itertuples(index=False, name=None)
            body += _table(list(frame.columns), rows)
            md += _md_table(list(frame.columns), frame.itertuples(index=False, name=None)) + "\n"
        else:
            body += _note(f"{Files.SCALING}/ holds no {Files.SCALING_TABLE}")
        for png in sorted(data.scaling_dir.glob("*.png")):
            uri = "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")
            body += _figure(uri, f"scaling figure {png.name}")
            md += f"- figure scaling/{png.name} (embedded in index.html)\n"
        return body, md

    return _guard("scaling", "Batch-size scaling", build)


def _failures(data: CampaignData) -> Section:
    failed = [data.record(t) for t in data.failed()]
    interrupted = [r for r in data.records() if r.state_name == "INTERRUPTED"]
    if not failed and not interrupted:
        return Section("failures", "Failures", _note("no trial failed"), "No trial failed.")
    rows = [(r.number, r.fail_reason or "unknown", json.dumps(r.params, default=str)) for r in failed]
    rows += [(r.number, "interrupted (resume to finish)", json.dumps(r.params, default=str)) for r in interrupted]
    body = _table(("trial", "reason", "params"), rows)
    for r in failed:
        tb = r.traceback[-MAX_TRACEBACK:]
        if tb:
            body += f"<details><summary>trial {r.number}: traceback</summary><pre>{_e(tb)}</pre></details>"
    return Section("failures", "Failures", body, _md_table(("trial", "reason", "params"), rows))


def _environment(data: CampaignData) -> Section:
    env = data.environment
    if env is None:
        text = (f"{data.folder.environment.name} is missing: this campaign started before environment capture, "
                "so the machine it ran on is unknown")  # fmt: skip
        return Section("environment", "Environment", _note(text), text + ".")
    torch = env.get("torch") or {}
    cluster = env.get("cluster") or {}
    trainer = env.get("trainer") or {}
    study = env.get("study") or {}
    packages = ", ".join(f"{k} {v}" for k, v in sorted((env.get("packages") or {}).items()) if v)
    pairs = [
        ("captured", env.get("captured")), ("command", " ".join(map(str, env.get("command") or []))),
        ("host", env.get("hostname")), ("python", (env.get("python") or {}).get("version")),
        ("platform", (env.get("platform") or {}).get("platform")),
        ("torch", torch.get("version")), ("CUDA", torch.get("cuda") or "none"),
        ("cuDNN", torch.get("cudnn") or "none"), ("NCCL", torch.get("nccl") or "none"),
        ("GPUs (controller)", ", ".join(torch.get("gpus") or []) or "none"),
        ("packages", packages),
        ("Dask cluster", _cluster_text(cluster)),
        ("trainer", trainer.get("entry")), ("trainer source", trainer.get("source")),
        ("trainer source sha256", trainer.get("source_sha256")),
        ("study seed", study.get("seed")), ("spec sha256", study.get("spec_sha256")),
        ("resumed", len(env.get("resumes") or [])),
    ]  # fmt: skip
    kv_html, kv_md = _kv(pairs)
    full = json.dumps(env, indent=2, sort_keys=True, default=str)
    body = kv_html + f"<details><summary>environment.json</summary><pre>{_e(full)}</pre></details>"
    return Section("environment", "Environment", body, kv_md)


def _cluster_text(cluster: dict[str, Any]) -> str:
    if not cluster:
        return "unknown"
    resources = ", ".join(f"{k}={v:g}" for k, v in sorted((cluster.get("resources") or {}).items()))
    return (f"{cluster.get('workers')} worker(s), {cluster.get('threads')} thread(s), resources {resources or 'none'}, "
            f"hosts {', '.join(cluster.get('hosts') or [])}")  # fmt: skip


def _reproduce(data: CampaignData) -> Section:
    root = str(data.folder.root)
    best = data.best(k=1)
    commands = [
        ("check the frozen spec", f"sha256sum {shlex.quote(str(data.folder.spec))}   # expect {data.spec.sha256}"),
        ("run the whole campaign again", f"hypersweep run {shlex.quote(str(data.folder.spec))} --runs-dir rerun"),
    ]
    if best:
        commands.append((f"re-run the best trial ({best[0].number}) alone and compare",
                         f"hypersweep reproduce {shlex.quote(root)} {best[0].number}"))
    commands.append(("re-render this report", f"hypersweep report {shlex.quote(root)}"))
    body = "".join(f"<p>{_e(what)}:</p><pre class=\"cmd\">{_e(cmd)}</pre>" for what, cmd in commands)
    md = "\n".join(f"{what}:\n\n```sh\n{cmd}\n```\n" for what, cmd in commands)
    return Section("reproduce", "Reproduce", body, md)


# --- the page ----------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:0 auto;max-width:1100px;
padding:1em 2em;color:#222;line-height:1.4}
h1{margin-bottom:.2em}nav a{margin-right:.8em;font-size:.9em}section{border-top:1px solid #ddd;margin-top:1.5em}
table{border-collapse:collapse;margin:.6em 0;font-size:.85em}th,td{border:1px solid #ccc;padding:.25em .5em;
text-align:left;vertical-align:top}th{background:#f3f3f3}table.kv td:first-child{font-weight:600;white-space:nowrap}
pre{background:#f7f7f7;padding:.6em;overflow-x:auto;font-size:.8em;white-space:pre-wrap}
figure{margin:.6em 0}img{max-width:100%}.note{color:#555;font-style:italic}.question{font-size:1.1em}
"""


def _html_page(data: CampaignData, sections: Sequence[Section]) -> str:
    title = f"hypersweep report: {data.spec.study.name}"
    nav = "".join(f'<a href="#{s.id}">{_e(s.title)}</a>' for s in sections)
    body = "".join(f'<section id="{s.id}"><h2>{_e(s.title)}</h2>{s.html}</section>' for s in sections)
    made = time.strftime("%Y-%m-%d %H:%M:%S")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{_e(title)}</h1><p class=\"note\">rendered {_e(made)} from {_e(data.folder.root)}; "
        f"{len(data.trials)} trials</p><nav>{nav}</nav>{body}</body></html>\n"
    )


def _markdown(data: CampaignData, sections: Sequence[Section]) -> str:
    parts = [f"# hypersweep report: {data.spec.study.name}\n", f"{len(data.trials)} trials; figures in index.html.\n"]
    parts += [f"## {s.title}\n\n{s.md.strip()}\n" for s in sections]
    return "\n".join(parts)
