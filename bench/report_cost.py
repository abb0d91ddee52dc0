"""What a trial's reports cost the controller where they are stored, before and after ``report_times``.

    python -m bench.report_cost [--trials 400] [--reports 10] [--reps 3]

Per report while a trial runs (unchanged by ``report_times``): its ``metrics.jsonl`` line
(``append_metrics_line``) and its intermediate value (``Trial.report`` into the group-commit journal).
At the tell, the trial's attributes in one journal append: ``metrics`` and ``history`` (before) or
``metrics``, ``history`` and ``report_times`` (after), as ``Ledger._record_outcome`` writes them; the
time per report and the journal bytes per report. Then what ``resume`` and ``report`` add per told trial
when no ``metrics.jsonl`` needs rewriting (``restore_metrics_files``: a read and a newline count each).
Medians over repetitions, on the machine's disk (a temporary folder).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import optuna

from search.store.folder import CampaignFolder
from search.store.records import append_metrics_line, encode_history, encode_metrics, write_attrs
from search.store.storage import flusher, open_storage
from search.store.trial_reports import restore_metrics_files

DIST: dict[str, optuna.distributions.BaseDistribution] = {"x": optuna.distributions.FloatDistribution(0.0, 1.0)}
METRICS = {"score": 0.5, "loss": 1.25, "epoch": 3.0, "epoch_seconds": 0.0123, "examples": 6400.0}


def _reports(n: int) -> list[tuple[int, dict[str, float], float]]:
    return [(step, {k: v + step / 7 for k, v in METRICS.items()}, 1.7e9 + step * 0.37) for step in range(1, n + 1)]


class Campaign:
    """A journal-backed study and a campaign folder, written as the controller writes them."""

    def __init__(self, folder: Path, times: bool) -> None:
        folder.mkdir()
        self.journal = folder / "study.journal"
        storage = open_storage(f"journal:{self.journal}", writer=True)
        self.study = optuna.create_study(storage=storage, sampler=optuna.samplers.RandomSampler(seed=0))
        self.flush = flusher(storage)
        self.folder = CampaignFolder(folder)
        self.times = times
        self.seconds = {"per_report": 0.0, "at_tell": 0.0}

    def one_trial(self, reports: list[tuple[int, dict[str, float], float]]) -> None:
        trial = self.study.ask(DIST)
        self.flush()
        path = self.folder.trial_metrics_file(trial.number)
        started = time.perf_counter()
        for step, metrics, at in reports:  # what IntermediateValues.record writes per report
            append_metrics_line(path, step, metrics, at)
            trial.report(metrics["score"], step)
        self.flush()
        self.seconds["per_report"] += time.perf_counter() - started
        started = time.perf_counter()
        fields: dict[str, object] = {"metrics": encode_metrics(METRICS), "history": encode_history(reports)}
        if self.times:  # what the ledger adds now
            fields["report_times"] = [at for _s, _m, at in reports]
        write_attrs(trial, **fields)
        self.flush()
        self.seconds["at_tell"] += time.perf_counter() - started
        self.study.tell(trial, 0.5)
        self.flush()


def one_run(folder: Path, trials: int, n_reports: int) -> dict[str, dict[str, float]]:
    """Both campaigns, a trial of each in turn (the same load on both): microseconds per report, journal bytes
    per report, and the check of ``resume``/``report`` per trial."""
    campaigns = {label: Campaign(folder / label, label == "after") for label in ("before", "after")}
    reports = _reports(n_reports)
    for _ in range(trials):
        for campaign in campaigns.values():
            campaign.one_trial(reports)
    out = {}
    for label, campaign in campaigns.items():
        started = time.perf_counter()
        assert restore_metrics_files(campaign.study.get_trials(deepcopy=False), campaign.folder) == []
        restore = time.perf_counter() - started
        all_reports = trials * n_reports
        out[label] = {
            "per_report_us": 1e6 * campaign.seconds["per_report"] / all_reports,
            "tell_attrs_us_per_report": 1e6 * campaign.seconds["at_tell"] / all_reports,
            "journal_bytes_per_report": campaign.journal.stat().st_size / all_reports,
            "restore_check_us_per_trial": 1e6 * restore / trials,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--reports", type=int, default=10)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for _rep in range(args.reps):
        with tempfile.TemporaryDirectory() as tmp:
            for label, row in one_run(Path(tmp), args.trials, args.reports).items():
                rows[label].append(row)
    print(f"{args.trials} trials x {args.reports} reports, median of {args.reps}:")
    for key in rows["before"][0]:
        before = statistics.median(r[key] for r in rows["before"])
        after = statistics.median(r[key] for r in rows["after"])
        print(f"  {key:28s} before {before:9.2f}   after {after:9.2f}")


if __name__ == "__main__":
    main()
