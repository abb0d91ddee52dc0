"""The report's sections about the run: the worker timeline, failures, the environment
and how to reproduce. Like :mod:`search.reports.sections`, each returns a :class:`Section`, left out
(with the reason) when it has nothing to show.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from search.reports import plots
from search.reports.data import CampaignData, searched_params
from search.reports.markup import LeftOut, Section, e, figure, guard, kv, left_out, md_table, note, table
from search.reports.timing import slot_count, timeline, timeline_origin, utilization, worker_labels
from search.spec.kept_trainer import environment_problem
from search.store.records import TrialRecord

__all__ = ["timeline_section", "failures", "environment", "reproduce", "MAX_TRACEBACK"]

MAX_TRACEBACK = 4000


def timeline_section(data: CampaignData) -> Section:
    def build() -> tuple[str, str]:
        spans = timeline(data.records(), data.asked_times())
        origin = timeline_origin(data.records(), data.asked_times())
        if not spans or origin is None:
            raise LeftOut("no trial recorded its start and end times")
        axis = data.time_axis(origin)
        use = utilization(spans, slot_count(data.environment, spans), axis)
        share = use["utilization"]
        trials = len({s.number for s in spans})
        runs = (
            f" in {len(spans)} runs (segments: a trial resumed from its checkpoint runs again)"
            if len(spans) > trials
            else ""
        )
        text = (
            f"{trials} trial(s){runs} on {len(use['per_worker'])} worker(s), {use['slots']} slot(s); "
            f"busy {use['busy_s']:.1f} s of {use['slots']} x {use['span_s']:.1f} s of run time: utilization "
            + (f"{share:.0%}" if share is not None else "n/a")
        )
        if axis.gaps:
            text += (
                f"; the campaign was resumed: {len(axis.gaps)} idle gap(s) between its runs "
                f"({use['cut_s']:.1f} s in all) are cut from the time axis (dashed lines) and not counted"
            )
        waits = [(s.waited, s.number) for s in spans if s.asked is not None]
        if waits:
            longest = max(waits)
            text += (
                f"; waiting between being asked and starting on a worker (queue, dispatch, worker start-up), "
                f"not counted as busy: {sum(w for w, _n in waits):.1f} s in all, the longest "
                f"{longest[0]:.1f} s (trial {longest[1]})"
            )
        labels = worker_labels([s.worker for s in spans])
        order: dict[str, list[str]] = {}
        for s in spans:  # spans come sorted by worker, then start
            order.setdefault(s.worker, []).append(str(s.number))
        rows = [
            (labels.get(w, w), w, f"{u:.0%}" if u is not None else "n/a", " ".join(order.get(w, [])))
            for w, u in use["per_worker"].items()
        ]
        columns = ("worker", "address", "busy share of the run time", "trials, in the order they ran")
        drawn = plots.gantt(spans, labels, axis)
        body = note(text) + figure(drawn, "trials per worker over time, with the wait before each trial")
        body += table(columns, rows)
        return body, text + "\n\n" + md_table(columns, rows)

    return guard("Worker and GPU timeline", build)


def failures(data: CampaignData) -> Section:
    failed = [data.record(t) for t in data.failed()]
    interrupted = [r for r in data.records() if r.state_name in ("INTERRUPTED", "HELD")]
    if not failed and not interrupted:
        return left_out("Failures", "no trial failed or was interrupted")
    shown = {r.number: json.dumps(searched_params(r, data.spec.space), default=str) for r in [*failed, *interrupted]}
    rows = [(r.number, r.fail_reason or "unknown", shown[r.number]) for r in failed]
    rows += [(r.number, _unfinished(r), shown[r.number]) for r in interrupted]
    body = table(("trial", "reason", "params"), rows)
    for r in failed:
        tb = r.traceback[-MAX_TRACEBACK:]
        if tb:
            body += f"<details><summary>trial {r.number}: traceback</summary><pre>{e(tb)}</pre></details>"
    return Section("Failures", body, md_table(("trial", "reason", "params"), rows))


def _unfinished(record: TrialRecord) -> str:
    """Why a trial left RUNNING has not finished: held by a budget (not failed: its next run was not started), or
    interrupted."""
    return f"held, not failed: {record.held}" if record.held else "interrupted (resume to finish)"


def environment(data: CampaignData) -> Section:
    env = data.environment
    if env is None:
        problem = environment_problem(data.folder.environment) or f"{data.folder.environment.name} is unreadable"
        cause = (
            "this campaign started before environment capture"
            if problem.endswith("missing")
            else "restore it from a copy if there is one"
        )
        text = f"{problem}: {cause}, so the machine it ran on is unknown"
        return Section("Environment", note(text), text + ".")
    torch = env.get("torch") or {}
    cluster = env.get("cluster") or {}
    trainer = env.get("trainer") or {}
    study = env.get("study") or {}
    packages = ", ".join(f"{k} {v}" for k, v in sorted((env.get("packages") or {}).items()) if v)
    pairs = [
        ("captured", env.get("captured")),
        ("command", " ".join(map(str, env.get("command") or []))),
        ("host", env.get("hostname")),
        ("python", (env.get("python") or {}).get("version")),
        ("platform", (env.get("platform") or {}).get("platform")),
        ("torch", torch.get("version")),
        ("CUDA", torch.get("cuda") or "none"),
        ("cuDNN", torch.get("cudnn") or "none"),
        ("NCCL", torch.get("nccl") or "none"),
        ("GPUs (controller)", ", ".join(torch.get("gpus") or []) or "none"),
        ("CPU (torch's kernels)", _cpu_text(env.get("cpu"))),
        ("intra-op threads per trial", _threads_text(env)),
        ("packages", packages),
        ("Dask cluster", _cluster_text(cluster)),
        ("trainer", trainer.get("entry")),
        ("trainer source", trainer.get("source")),
        ("trainer source sha256", trainer.get("source_sha256")),
        ("trainer files", _trainer_files_text(trainer)),
        ("trainer files sha256", trainer.get("files_sha256")),
        ("study seed", study.get("seed")),
        *_spec_digests(env, data.spec.sha256),
        ("resumed", len(env.get("resumes") or [])),
    ]
    kv_html, kv_md = kv(pairs)
    full = json.dumps(env, indent=2, sort_keys=True, default=str)
    body = kv_html + f"<details><summary>environment.json</summary><pre>{e(full)}</pre></details>"
    return Section("Environment", body, kv_md)


def _cpu_text(cpu: Any) -> str:
    """torch's CPU capability, the CPU and its cores: what a trial's floating point depends on (a trial's losses
    differ between AVX2 and AVX-512 kernels); "not recorded" for a campaign recorded before."""
    if not isinstance(cpu, dict):
        return "not recorded"
    chosen = ", ".join(f"{k}={v}" for k, v in sorted((cpu.get("env") or {}).items()) if v and "THREADS" not in k)
    return (
        f"{cpu.get('capability')} ({cpu.get('capability_source')}), {cpu.get('vendor')} {cpu.get('model')}, "
        f"{cpu.get('cores')} core(s)" + (f"; {chosen}" if chosen else "")
    )


def _threads_text(env: dict[str, Any]) -> str:
    if "trial_threads" not in env:
        return "not recorded"
    threads = env["trial_threads"]
    return f"{threads}, set by the trainer" if threads is not None else "inherited from the worker (not set)"


def _spec_digests(env: dict[str, Any], frozen: str) -> list[tuple[str, str]]:
    """The spec's sha256 as each run recorded it (the first run, then each resume), each said to match or not
    the frozen spec.toml the report read (a resume with ``--n-trials`` or ``--allow-changes`` rewrites it)."""

    def text(record: Any) -> str:
        digest = ((record or {}).get("study") or {}).get("spec_sha256") if isinstance(record, dict) else None
        if not digest:
            return "not recorded"
        return f"{digest} ({'the frozen spec.toml' if digest == frozen else 'differs from the frozen spec.toml'})"

    resumes = [r for r in env.get("resumes") or [] if isinstance(r, dict)]
    rows = [("spec sha256 at the first run", text(env))]
    rows += [(f"spec sha256 at resume {i} ({r.get('captured') or '?'})", text(r)) for i, r in enumerate(resumes, 1)]
    return rows


def _trainer_files_text(trainer: dict[str, Any]) -> str | None:
    """How many of the trainer's files ``files_sha256`` covers, and under which folder (None: not recorded)."""
    files = trainer.get("files")
    if files is None:  # recorded before the trainer's files were
        return None
    text = f"{len(files)} file(s)" + (f" under {trainer['root']}" if trainer.get("root") else "")
    return text + (f" ({trainer['files_note']})" if trainer.get("files_note") else "")


def _cluster_text(cluster: dict[str, Any]) -> str:
    if not cluster:
        return "unknown"
    resources = ", ".join(f"{k}={v:g}" for k, v in sorted((cluster.get("resources") or {}).items()))
    return (
        f"{cluster.get('workers')} worker(s), {cluster.get('threads')} thread(s), resources {resources or 'none'}, "
        f"hosts {', '.join(cluster.get('hosts') or [])}"
    )


def reproduce(data: CampaignData) -> Section:
    root = str(data.folder.root)
    best = data.best(k=1)
    commands = [
        ("check the frozen spec", f"sha256sum {shlex.quote(str(data.folder.spec))}   # expect {data.spec.sha256}"),
        ("run the whole campaign again", f"hypersweep run {shlex.quote(str(data.folder.spec))} --runs-dir rerun"),
    ]
    if best:
        commands.append(
            (
                f"re-run the best trial ({best[0].number}) alone and compare",
                f"hypersweep reproduce {shlex.quote(root)} {best[0].number}",
            )
        )
    commands.append(("re-render this report", f"hypersweep report {shlex.quote(root)}"))
    body = "".join(f'<p>{e(what)}:</p><pre class="cmd">{e(cmd)}</pre>' for what, cmd in commands)
    md = "\n".join(f"{what}:\n\n```sh\n{cmd}\n```\n" for what, cmd in commands)
    return Section("Reproduce", body, md)
