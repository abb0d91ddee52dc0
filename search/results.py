"""A campaign's results as a notebook reads them (:class:`search.Result`): every trial's final metrics,
its folder and checkpoint, and every report as one long table."""

from __future__ import annotations

from pathlib import Path

import optuna
import pandas as pd

from search.store.folder import CampaignFolder
from search.store.records import TrialRecord
from search.store.trial_reports import reports_of
from search.store.warm_marks import own_trials

__all__ = ["trials_table", "history_frame", "checkpoint_of", "HISTORY_COLUMNS"]

HISTORY_COLUMNS = ("trial", "step", "metric", "value", "time")
# what trainers write as their checkpoint in trials/<n>/: the built-in loop, Lightning, Hugging Face
CHECKPOINT_PATTERNS = ("checkpoint.pt", "*.ckpt", "checkpoint-*", "*.pt")


def trials_table(study: optuna.Study, metrics: tuple[str, ...], folder: CampaignFolder) -> pd.DataFrame:
    """The summary's rows (number, state, objectives, duration, params, reason), plus every other final
    metric the trainer returned (a column each), the trial's ``folder`` and its ``checkpoint`` (or None)."""
    from search.reports.summary import trials_frame

    frame = trials_frame(study, metrics)
    if frame.empty:
        return frame
    records = {t.number: TrialRecord.of(t) for t in own_trials(study.get_trials(deepcopy=False))}
    finals = pd.DataFrame([records[n].metrics or {} for n in frame["number"]], index=frame.index)
    finals = finals[[c for c in finals.columns if c not in frame.columns]]
    where = pd.DataFrame(
        {
            "folder": [str(folder.trial(int(n))) for n in frame["number"]],
            "checkpoint": [_str_or_none(checkpoint_of(folder.trial(int(n)))) for n in frame["number"]],
        },
        index=frame.index,
    )
    reason = frame.pop("reason")
    return pd.concat([frame, finals, where, reason], axis=1)


def history_frame(study: optuna.Study, folder: CampaignFolder) -> pd.DataFrame:
    """Every report of every trial, one row per (trial, step, metric): ``value`` and wall-clock ``time``; a told
    trial's from the study, a running one's from its ``metrics.jsonl`` (:func:`~search.store.trial_reports.reports_of`)."""
    rows = []
    for trial in own_trials(study.get_trials(deepcopy=False)):
        for step, metrics, at in reports_of(trial, folder):
            rows += [(trial.number, int(step), str(name), float(value), float(at)) for name, value in metrics.items()]
    frame = pd.DataFrame(rows, columns=list(HISTORY_COLUMNS))
    frame["time"] = pd.to_datetime(frame["time"], unit="s")
    return frame.sort_values(["trial", "step", "metric"], kind="stable").reset_index(drop=True)


def checkpoint_of(trial_folder: Path) -> Path | None:
    """The trial's newest checkpoint (file or folder) in ``trials/<n>/``, by the trainers' naming; None if none."""
    for pattern in CHECKPOINT_PATTERNS:
        found = sorted(trial_folder.glob(pattern), key=lambda p: (p.stat().st_mtime, p.name))
        if found:
            return found[-1]
    return None


def _str_or_none(path: Path | None) -> str | None:
    return None if path is None else str(path)
