"""A trial's reports, from their one source: the study; ``trials/<n>/metrics.jsonl`` is derived from it.

A report reaches the controller twice (as an event while the trial runs, and again in the outcome's history,
so that one the event stream dropped is not lost) and is kept once (``IntermediateValues``). It then lands in:

- the trial's ``metrics.jsonl``, appended as it comes (not fsynced): the live view, and for a trial not yet
  told the log ``resume`` reads back (a lost line is re-sent by the trainer from its checkpoint);
- Optuna's intermediate values (the objective only, keyed by the pruning resource): what the pruner reads;
- the sinks (TensorBoard, MLflow, W&B): copies for those tools, never read back;
- when the trial is told, the study: ``history`` (``[step, metrics]``) and ``report_times`` (each report's
  time), in the same journal append as the tell, so they are as durable as the trial's state.

Once a trial is told, its study record is the truth: :func:`reports_of` reads it (``Result.history``, the
report page reads the same ``history``), and :func:`restore_metrics_files` rewrites a ``metrics.jsonl`` that
holds fewer lines than that record (lost, emptied or cut by a fault: it is never fsynced as it grows), written
whole to a temporary file, fsynced and renamed. ``resume`` and ``report`` call it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import Any

from optuna.trial import FrozenTrial

from search.store.folder import CampaignFolder, write_atomic
from search.store.records import Attr, TrialRecord, metrics_line, read_metrics_lines

__all__ = ["ReportLine", "reports_of", "told_reports", "restore_metrics_files"]

log = logging.getLogger(__name__)

ReportLine = tuple[int, dict[str, float], float]  # (step, metrics, time): a line of metrics.jsonl


def told_reports(record: TrialRecord) -> list[ReportLine] | None:
    """The reports the study holds for a told trial, with their times; None where it holds no times (a trial
    not told yet, or one recorded before ``report_times`` existed)."""
    raw, times = record.recorded_history, record.report_times
    if len(raw) != len(times):
        return None
    lines = []
    for item, at in zip(raw, times, strict=True):
        parsed = _line(item, at)
        if parsed is not None:
            lines.append(parsed)
    return lines


def reports_of(trial: FrozenTrial, folder: CampaignFolder) -> list[ReportLine]:
    """Every report of ``trial`` as ``(step, metrics, time)``, in order: from the study once it is told, else
    from its ``metrics.jsonl`` (a running or interrupted trial, or one told before ``report_times`` existed,
    whose ``history`` fills in, without times, where the file lost reports)."""
    record = TrialRecord.of(trial)
    told = told_reports(record) if Attr.HISTORY in trial.user_attrs else None
    if told is not None:
        return told
    lines = read_metrics_lines(folder.trial_metrics(trial.number))
    if len(lines) >= len(record.history):
        return lines
    return [(step, metrics, math.nan) for step, metrics in record.history]


def restore_metrics_files(trials: Iterable[FrozenTrial], folder: CampaignFolder) -> list[int]:
    """Rewrite the ``metrics.jsonl`` of each told trial whose file holds fewer lines than its study record has
    reports (missing, empty, cut); return their numbers. A file that holds them all is only counted, not read
    as JSON; a trial without ``report_times`` (an older campaign) is left as it is."""
    rewritten = []
    for trial in trials:
        raw = trial.user_attrs.get(Attr.HISTORY)
        if not raw or _line_count(folder.trial_metrics_file(trial.number)) >= len(raw):
            continue
        record = TrialRecord.of(trial)
        told = told_reports(record)
        if not told or len(read_metrics_lines(folder.trial_metrics(trial.number))) >= len(told):
            continue
        text = "".join(metrics_line(step, metrics, at, record.worker or "") for step, metrics, at in told)
        path = folder.trial_metrics(trial.number)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)  # fsynced, then renamed over what the fault left
        rewritten.append(trial.number)
    if rewritten:
        log.warning("trials %s: metrics.jsonl held fewer reports than the study; rewritten from it", rewritten)
    return rewritten


def _line_count(path: str) -> int:
    """Newlines in the file (0 where there is none); a torn line counts, which only spares a rewrite."""
    try:
        with open(path, "rb") as fh:
            return fh.read().count(b"\n")
    except FileNotFoundError:
        return 0


def _line(item: Any, at: Any) -> ReportLine | None:
    try:
        step, metrics = item
        return int(step), {str(k): _number(v) for k, v in dict(metrics).items()}, float(at)
    except (TypeError, ValueError):
        return None


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
