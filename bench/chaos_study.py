"""What a chaos campaign leaves, read back with plain Optuna, and its checks (:func:`check_study`)."""

from __future__ import annotations

import collections
import dataclasses
import json
from pathlib import Path
from typing import Any

__all__ = [
    "CHECKPOINT",
    "DEATHS",
    "PIDFILE",
    "STUDY",
    "ChaosResult",
    "check_study",
    "count_trials",
    "metrics_steps",
    "open_study",
    "read_text",
]

STUDY = "chaos"

CHECKPOINT = "chaos_checkpoint.json"  # in the trial's checkpoint_dir: {"identity": ..., "history": [metrics, ...]}
PIDFILE = "chaos.pid"  # in the trial's checkpoint_dir while fit runs: the pid of its process (a Dask worker)
DEATHS = "chaos_deaths"  # in the trial's checkpoint_dir: how often ``options.die_between`` killed its worker


def read_text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


# --- the checks, with plain Optuna ---------------------------------------------------------------


@dataclasses.dataclass
class ChaosResult:
    """What the kills did and what the study holds afterwards."""

    sampler: str
    budget: int
    epochs: int
    signal: str = "KILL"
    kills: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # per kill: delay, trials, returncode, left
    finished_early: bool = False  # the budget was spent before every kill happened
    worker_kills_wanted: int = 0
    worker_kills: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # per kill: at, pid, trials
    final_returncode: int | None = None
    final_stderr: str = ""
    trials: int = 0
    states: dict[str, int] = dataclasses.field(default_factory=dict)
    lost: list[int] = dataclasses.field(default_factory=list)
    failed: dict[int, str] = dataclasses.field(default_factory=dict)  # number -> recorded reason
    duplicated: list[list[int]] = dataclasses.field(default_factory=list)  # groups of trial numbers
    missing_reports: dict[int, list[int]] = dataclasses.field(default_factory=dict)  # number -> missing steps
    repeated_reports: dict[int, list[int]] = dataclasses.field(default_factory=dict)  # number -> steps kept twice
    resumed_runs: int = 0  # runs of fit that started from a checkpoint (a retry or a resume)
    resent_reports: int = 0  # reports those runs sent again
    gaps_filled: dict[int, list[int]] = dataclasses.field(default_factory=dict)  # number -> steps kept from a re-send
    worker_deaths: int = 0  # workers fit killed between a report and its checkpoint (``options.die_between``)
    seconds: float = 0.0

    @property
    def bad_interrupts(self) -> list[int]:
        """The SIGTERMed controllers (1-based) that did not exit 130 on their own."""
        return [i for i, kill in enumerate(self.kills, 1) if kill["signal"] == "TERM" and kill["returncode"] != 130]

    @property
    def ok(self) -> bool:
        return (
            self.final_returncode == 0
            and self.trials == self.budget
            and not self.lost
            and not self.failed
            and not self.duplicated
            and not self.missing_reports
            and not self.repeated_reports
            and not self.bad_interrupts
        )

    def lines(self) -> list[str]:
        how = "kill -9" if self.signal == "KILL" else "SIGTERM"
        out = [
            f"sampler {self.sampler}: {len(self.kills)} {how} of the controller"
            + (" (the budget was spent before the last one)" if self.finished_early else "")
            + (f", {len(self.worker_kills)} kill -9 of a worker" if self.worker_kills_wanted else "")
            + (
                f" (of {self.worker_kills_wanted}: the budget was spent first)"
                if len(self.worker_kills) < self.worker_kills_wanted
                else ""
            )
        ]
        for i, kill in enumerate(self.kills, 1):
            line = f"  kill {i}: {kill['delay']:.2f} s after the storage grew, {kill['trials']} trial(s) in the storage"
            if kill["signal"] == "TERM":
                line += f"; exit status {kill['returncode']} after {kill['exit_s']:.1f} s"
                line += f", {len(kill['left'])} process(es) left behind {kill['left'] or ''}"
                if kill["stayed"]:
                    line += f", still there 2 s later: {kill['stayed']}"
            out.append(line)
        for i, kill in enumerate(self.worker_kills, 1):
            out.append(
                f"  worker kill {i}: pid {kill['pid']} at {kill['at']:.2f} s of running time (controller "
                f"run {kill['run']}), running trial(s) {kill['running']}, {kill['trials']} in the storage"
            )

        def verdict(bad: object) -> str:
            return "FAIL" if bad else "OK"

        missing = sum(map(len, self.missing_reports.values()))
        repeated = sum(map(len, self.repeated_reports.values()))
        out += [
            f"final resume exit status: {self.final_returncode}",
            f"budget:            {self.trials} trials of {self.budget}  {verdict(self.trials != self.budget)}",
            f"states:            {', '.join(f'{n} {s}' for s, n in sorted(self.states.items()))}",
            f"lost (unfinished): {len(self.lost)} {self.lost or ''}  {verdict(self.lost)}",
            f"failed trials:     {len(self.failed)} {self.failed or ''}  {verdict(self.failed)}",
            f"duplicated params: {len(self.duplicated)} {self.duplicated or ''}  {verdict(self.duplicated)}",
            f"missing reports:   {missing} step(s) in {len(self.missing_reports)} trial(s) "
            f"{self.missing_reports or ''}  {verdict(self.missing_reports)}",
            f"repeated reports:  {repeated} step(s) in {len(self.repeated_reports)} trial(s) "
            f"{self.repeated_reports or ''}  {verdict(self.repeated_reports)}",
        ]
        torn = [kill for kill in self.kills if kill.get("torn")]
        if any("torn" in kill for kill in self.kills):
            out.append(
                f"torn journals:     {len(torn)} of {len(self.kills)} kills tore the line after the last trial "
                f"creation ({sum(k['cut_bytes'] for k in torn)} bytes cut in all)"
            )
        if self.worker_deaths:
            out.append(f"worker deaths:     {self.worker_deaths} between a report and its checkpoint")
        out.append(
            f"re-sent reports:   {self.resent_reports} in {self.resumed_runs} run(s) resumed from a checkpoint; "
            f"{sum(map(len, self.gaps_filled.values()))} of them filled a gap {self.gaps_filled or ''}"
        )
        if self.signal == "TERM":
            out.append(
                f"interrupts:        {len(self.kills) - len(self.bad_interrupts)} of {len(self.kills)} "
                f"exited 130 {self.bad_interrupts or ''}  {verdict(self.bad_interrupts)}"
            )
        out += [f"wall time:         {self.seconds:.1f} s", "RESULT: " + ("PASS" if self.ok else "FAIL")]
        if self.final_returncode not in (0, None) and self.final_stderr:
            out.append("last resume's stderr (tail):\n" + self.final_stderr[-2000:])
        return out


def open_study(folder: Path, name: str = STUDY) -> Any:
    """The campaign's study, opened with plain Optuna as a reader (``search.store.storage.open_storage``)."""
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = JournalStorage(JournalFileBackend(str(folder / "study.journal")))
    return optuna.load_study(study_name=name, storage=storage)


def check_study(folder: Path, result: ChaosResult, name: str = STUDY) -> ChaosResult:
    """Fill ``result`` from the study in ``folder``: budget, lost, failed, duplicated, missing/repeated reports."""
    from optuna.trial import TrialState

    trials = open_study(folder, name).get_trials(deepcopy=False)
    result.trials = len(trials)
    result.states = dict(collections.Counter(t.state.name for t in trials))
    result.lost = [t.number for t in trials if not t.state.is_finished()]
    result.failed = {
        t.number: str(t.user_attrs.get("fail_reason") or t.user_attrs.get("stop_reason") or "?")
        for t in trials
        if t.state == TrialState.FAIL
    }
    by_params: dict[tuple, list[int]] = collections.defaultdict(list)
    for t in trials:
        by_params[tuple(sorted(t.params.items()))].append(t.number)
    result.duplicated = [numbers for numbers in by_params.values() if len(numbers) > 1]
    every = set(range(1, result.epochs + 1))
    for t in trials:
        if t.state != TrialState.COMPLETE:
            continue
        history = [int(step) for step, _metrics in t.user_attrs.get("history") or ()]
        lines = metrics_steps(folder / "trials" / str(t.number) / "metrics.jsonl")
        missing = sorted((every - set(history)) | (every - set(t.intermediate_values)) | (every - set(lines)))
        if missing:
            result.missing_reports[t.number] = missing
        repeated = sorted({step for steps in (history, lines) for step in steps if steps.count(step) > 1})
        if repeated:
            result.repeated_reports[t.number] = repeated
    for t in trials:
        _count_resends(folder / "trials" / str(t.number), t.number, result)
        result.worker_deaths += int(read_text(folder / "trials" / str(t.number) / DEATHS) or 0)
    return result


def _count_resends(trial: Path, number: int, result: ChaosResult) -> None:
    """From fit's checkpoint: the runs resumed from it, the reports they re-sent, and which of those the
    controller kept (its ``metrics.jsonl`` line is later than the resume: the first send was lost)."""
    try:
        resumes = json.loads((trial / CHECKPOINT).read_text()).get("resumes", ())
        lines = [json.loads(line) for line in (trial / "metrics.jsonl").read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return
    for at, covered in resumes:
        result.resumed_runs += 1
        result.resent_reports += int(covered)
        filled = sorted({int(r["step"]) for r in lines if int(r["step"]) <= covered and float(r["time"]) >= at})
        if filled:
            result.gaps_filled.setdefault(number, []).extend(filled)


def metrics_steps(path: Path) -> list[int]:
    """The steps in a trial's ``metrics.jsonl``, one per whole line (plain json)."""
    steps = []
    try:
        text = path.read_text()
    except FileNotFoundError:
        return steps
    for line in text.splitlines():
        try:
            steps.append(int(json.loads(line)["step"]))
        except (ValueError, TypeError, KeyError):
            continue  # a torn line
    return steps


def count_trials(folder: Path) -> int:
    try:
        return len(open_study(folder).get_trials(deepcopy=False))
    except Exception:  # noqa: BLE001 - a journal being written, or not created yet
        return -1
