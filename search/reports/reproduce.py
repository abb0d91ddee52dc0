"""``hypersweep reproduce``: re-run one trial alone, in this process, and compare it with the record.

The trial runs from the frozen spec's trainer and its recorded config (params,
seed, epochs, dataset, options), with no checkpoint directory, so it starts
from scratch and never resumes the campaign's checkpoint. Its final metrics
and every reported step are compared with the study's record: exactly when the
config is deterministic on the CPU, else within a relative tolerance. Timing
metrics (``epoch_seconds``) and metrics the record lacks are shown but not
compared; a changed trainer file (the sha256 of each file of the trainer's package,
in ``environment.json``) is noted. The trainer is found as the campaign found it
(the folders it recorded, the spec's folder, the current directory), and one that
went to the workers by value (defined in a script or notebook) runs from the copy
the campaign kept (``trainer.pkl``). A trial that ran in segments (resized: ``segments``) replays each at
its width and parameters (:mod:`search.reports.segment_replay`); a PBT member its schedule (:mod:`search.pbt.replay`). What differs from the machine the campaign recorded
(package versions, torch's CPU capability, the CPU, the kernel variables, the trials' thread count:
:mod:`search.store.machine`) is named, on its own line and in a MISMATCH verdict. A trainer that sets no
intra-op thread count runs at the count its campaign's workers gave it (their recorded ``OMP_NUM_THREADS``), not
at torch's default here (one per core). A data-parallel trial's ranks come from a warm pool, as on a worker
(:mod:`trainers.warm_pool`: forks of a process that has imported torch, about a tenth of a second each instead of
the seconds a fresh interpreter takes; ``HYPERSWEEP_WARM_POOL=0`` starts them fresh), ended with the replay
(:func:`trainers.warm_pool.pooled`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from search.scaling.replay import ReplayPlan, replay_notes, sweep_replay
from search.spec.campaign_spec import CampaignSpec, TrainerSpec, load_spec
from search.spec.trainer_check import check_trainer
from search.store.folder import CampaignFolder
from search.store.records import Attr, Files, TrialRecord, spec_sha256_of
from search.store.storage import open_storage, storage_url
from spaces.errors import InputError

__all__ = ["Check", "Reproduction", "reproduce_trial", "compare", "comparison_text", "DEFAULT_TOLERANCE"]

DEFAULT_TOLERANCE = 1e-6
TIMING_METRICS = frozenset({"epoch_seconds", "seconds", "time", "duration"})


@dataclasses.dataclass(frozen=True)
class Check:
    """One compared value: ``where`` is "final" or "step N"."""

    where: str
    metric: str
    recorded: float | None
    reproduced: float | None
    skipped: str = ""  # why the value is shown but not compared ("timing", "not recorded")

    @property
    def compared(self) -> bool:
        return not self.skipped

    def ok(self, tolerance: float) -> bool:
        if not self.compared:
            return True
        a, b = self.recorded, self.reproduced
        if a is None or b is None:
            return False
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        if tolerance == 0.0:
            return a == b
        return math.isclose(a, b, rel_tol=tolerance, abs_tol=tolerance * 1e-6)

    def rel_diff(self) -> float | None:
        a, b = self.recorded, self.reproduced
        if a is None or b is None or math.isnan(a) or math.isnan(b):
            return None
        scale = max(abs(a), abs(b))
        return abs(a - b) / scale if scale else 0.0


@dataclasses.dataclass(frozen=True)
class Reproduction:
    study: str
    number: int
    entry: str
    config: dict[str, Any]
    exact: bool
    tolerance: float  # 0.0 when exact
    checks: tuple[Check, ...]
    notes: tuple[str, ...] = ()
    error: str = ""
    machine: tuple[str, ...] = ()  # what differs from the machine the campaign recorded (versions, CPU, threads)

    def mismatches(self) -> list[Check]:
        return [c for c in self.checks if not c.ok(self.tolerance)]

    @property
    def matched(self) -> bool:
        return not self.error and not self.mismatches() and not any(n.startswith("MISMATCH") for n in self.notes)


def reproduce_trial(path: str | Path, number: int, tolerance: float = DEFAULT_TOLERANCE) -> Reproduction:
    """Run trial ``number`` of the campaign in ``path`` again and compare it with its record."""
    if not (tolerance >= 0.0 and math.isfinite(tolerance)):
        raise InputError(f"--tolerance={tolerance}: must be a finite number >= 0")
    folder = CampaignFolder.existing(path)
    spec = load_spec(folder.spec, check_trainer=False)
    study = optuna.load_study(study_name=spec.study.name, storage=open_storage(storage_url(spec.study.storage, folder)))
    trial = _recorded_trial(study, number, folder)
    check_trainer(spec)  # only now, to re-run it: the trainer is imported and checked against the spec
    config = _local_config(trial)
    if spec.trainer.objective:  # an Optuna objective's suggestions, recorded as it made them: replayed
        config["params"] = dict(trial.params)
    exact = bool(config.get("deterministic")) and _runs_on_cpu(config)
    notes = _spec_notes(spec.sha256, study) + _trainer_notes(spec.trainer.entry, folder)
    sweep = sweep_replay(spec, trial)  # a scaling-sweep trial stops where the campaign stopped it, at its target
    threads = _inherited_threads(folder)
    notes += _retry_notes(trial) + _thread_notes(threads)
    from trainers import warm_pool  # at run time: a data-parallel trial's ranks forked from one warm server

    with _intra_op_threads(threads), warm_pool.pooled():  # a trainer that sets no thread count: its workers' count
        reports, metrics, error = _replay(spec, study, folder, trial, config, sweep, notes)
    checks = compare(trial.history, dict(trial.metrics or {}), reports, metrics)
    notes += replay_notes(sweep, trial.history, reports) if sweep is not None else []
    return Reproduction(
        spec.study.name,
        number,
        spec.trainer.entry,
        config,
        exact,
        0.0 if exact else tolerance,
        tuple(checks),
        tuple(notes),
        error,
        tuple(_machine_differences(spec.trainer, folder)),
    )


def _replay(
    spec: CampaignSpec,
    study: optuna.Study,
    folder: CampaignFolder,
    trial: TrialRecord,
    config: dict[str, Any],
    sweep: ReplayPlan | None,
    notes: list[str],
) -> tuple[list[tuple[int, dict[str, float]]], dict[str, float], str]:
    """Run the trial again as the campaign ran it: a PBT member's schedule, a resized trial's segments, or alone."""
    stop_after = _stop_after(trial) if sweep is None else sweep.stop_after
    if spec.pbt is not None:  # a population member: its whole schedule and inherited checkpoints
        from search.pbt.replay import replay_member
        from trainers.api import load_trainer

        return replay_member(spec, study, folder, trial.number, load_trainer(spec.trainer.entry), notes)
    if len(trial.segments) > 1:  # a resized trial: each segment at its width and parameters, in turn
        from search.loop.segments import Segment
        from search.reports.segment_replay import replay_segments

        segments = [Segment.from_record(r) for r in trial.segments]
        notes.append(f"replayed its {len(segments)} segments: widths {', '.join(str(s.width) for s in segments)}")
        return replay_segments(spec.trainer.entry, config, segments, stop_after, spec.study.metrics)
    return _run(spec.trainer.entry, config, stop_after=stop_after, names=spec.study.metrics)


def _inherited_threads(folder: CampaignFolder) -> int | None:
    from search.store.environment import read_environment
    from search.store.machine import inherited_threads

    return inherited_threads(read_environment(folder.environment) or {})


def _retry_notes(trial: TrialRecord) -> list[str]:
    """A trial retried from its checkpoint (its worker lost) is compared over all its attempts' reports."""
    if not trial.retries:
        return []
    return [
        f"trial {trial.number} was retried {trial.retries} time(s) from its checkpoint after losing its worker: "
        "its record joins the attempts' reports, each step once"
    ]


def _thread_notes(threads: int | None) -> list[str]:
    if threads is None:
        return []
    return [
        f"the trainer sets no intra-op thread count of its own: it runs here with {threads} intra-op "
        f"thread{'' if threads == 1 else 's'}, as on the campaign's workers (OMP_NUM_THREADS={threads})"
    ]


@contextlib.contextmanager
def _intra_op_threads(threads: int | None) -> Iterator[None]:
    """torch's intra-op thread count set to ``threads`` for the replay (None: left as it is), then restored."""
    if threads is None:
        yield
        return
    import torch  # lazily: search does not import torch at import time

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _machine_differences(trainer: TrainerSpec, folder: CampaignFolder) -> list[str]:
    """What differs between the machine the campaign recorded and this one (after the run: torch is loaded)."""
    from search.store.environment import machine_now, read_environment
    from search.store.machine import machine_differences

    recorded = read_environment(folder.environment)
    return machine_differences(recorded, machine_now(trainer)) if recorded else []


def _recorded_trial(study: optuna.Study, number: int, folder: CampaignFolder) -> TrialRecord:
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    if number not in trials:
        raise InputError(f"{folder.root}: no trial {number} (trials are 0..{max(trials, default=-1)})")
    trial = TrialRecord.of(trials[number])
    if trial.state not in (TrialState.COMPLETE, TrialState.PRUNED):
        reason = trial.fail_reason or "it has no final result"
        raise InputError(f"trial {number} is {trial.state.name} ({reason}): only a finished trial can be reproduced")
    if trial.config is None or trial.metrics is None:
        raise InputError(
            f"trial {number} has no recorded config or metrics (user attrs {Attr.CONFIG!r}, {Attr.METRICS!r})"
        )
    return trial


def _local_config(trial: TrialRecord) -> dict[str, Any]:
    """The recorded config, run here: no checkpoint directory (never resume), no log folder, no leased devices."""
    config = dict(trial.config or {})
    config["checkpoint_dir"] = None
    config["log_dir"] = None
    config.pop("devices", None)
    return config


def _runs_on_cpu(config: Mapping[str, Any]) -> bool:
    if config.get("device") == "cpu":
        return True
    if config.get("device") == "cuda":
        return False
    import torch  # lazily: "auto" means CUDA when this process has it

    return not torch.cuda.is_available()


def _stop_after(trial: TrialRecord) -> int | None:
    """A pruned or stopped trial made as many reports as its record holds; stop it there again."""
    if trial.state == TrialState.PRUNED or trial.stop_reason:
        return len(trial.recorded_history) or None
    return None


def _spec_notes(sha256: str, study: optuna.Study) -> list[str]:
    """Whether the frozen spec (its ``sha256``) is the one the study recorded."""
    recorded = spec_sha256_of(study)
    if recorded is None:
        return ["the study recorded no spec hash; the frozen spec is used as it is"]
    if recorded != sha256:
        return [f"MISMATCH: spec.toml has sha256 {sha256} but the study was run with {recorded}"]
    return [f"spec.toml sha256 {sha256} matches the study's record"]


def _trainer_notes(entry: str, folder: CampaignFolder) -> list[str]:
    """Whether the trainer's files (its whole package, or the modules it imported) are those the campaign ran."""
    from search.spec.kept_trainer import environment_problem
    from search.store.environment import changed_trainer_files, read_environment, trainer_source_sha256
    from trainers.api import registered_trainer

    recorded = (read_environment(folder.environment) or {}).get("trainer") or {}
    notes = []
    if recorded.get("pickle") and registered_trainer(entry) is not None:
        notes.append(
            f"the trainer {entry} runs from the copy the campaign kept "
            f"({folder.root / recorded['pickle']}): it was defined in a script or notebook"
        )
    if recorded.get("files"):
        changed = changed_trainer_files(recorded)
        if changed:
            shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
            return notes + [
                f"note: {len(changed)} of the trainer's {len(recorded['files'])} recorded file(s) "
                f"changed since the campaign ran: {shown} (under {recorded.get('root')})"
            ]
        return notes + [
            f"trainer files: sha256 {str(recorded.get('files_sha256'))[:12]}... over "
            f"{len(recorded['files'])} file(s) matches the campaign's record"
        ]
    if recorded.get("source_sha256") is None:
        problem = environment_problem(folder.environment) or f"none in {Files.ENVIRONMENT}"
        return notes + [f"the campaign recorded no trainer source hash ({problem})"]
    if recorded.get("shipped") == "by value":
        return notes
    now = trainer_source_sha256(entry).get("source_sha256")
    if recorded["source_sha256"] != now:
        return notes + [
            f"note: the trainer's source changed since the campaign ran (sha256 "
            f"{recorded['source_sha256'][:12]}... then, {str(now)[:12]}... now)"
        ]
    return notes + [f"trainer source sha256 {recorded['source_sha256'][:12]}... matches the campaign's record"]


def _run(
    entry: str, config: dict[str, Any], stop_after: int | None, names: tuple[str, ...] = ()
) -> tuple[list[tuple[int, dict[str, float]]], dict[str, float], str]:
    """Run the trial alone: its reports, its final metrics (a number or tuple returned: as the study's ``names``,
    as the campaign took them), and what it raised, if it did."""
    from cluster.entrypoint import returned
    from trainers.api import RecordingReporter, TrialConfig, load_trainer  # by name, at run time

    fit = load_trainer(entry)
    reporter = RecordingReporter(stop_after=stop_after)
    try:
        metrics, values = returned(fit(TrialConfig.from_dict(config), reporter))
    except Exception as exc:  # noqa: BLE001 - a trial that now fails is a mismatch, shown as one line
        return reporter.reports, {}, f"the trainer raised {type(exc).__name__}: {exc}"
    return reporter.reports, {**metrics, **dict(zip(names, values))}, ""


def _num(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(value)  # "nan"/"inf" strings as the campaign stores non-finite values
    except (TypeError, ValueError):
        return None


def compare(
    recorded_history: Sequence[tuple[int, Mapping[str, Any]]],
    recorded_metrics: Mapping[str, Any],
    history: Sequence[tuple[int, Mapping[str, float]]],
    metrics: Mapping[str, float],
) -> list[Check]:
    """Every final metric, then every metric of every step, recorded against reproduced."""
    checks = _compare_one("final", recorded_metrics, metrics)
    recorded_steps = {step: m for step, m in recorded_history}
    new_steps = {step: m for step, m in history}
    for step in sorted(set(recorded_steps) | set(new_steps)):
        checks += _compare_one(f"step {step}", recorded_steps.get(step, {}), new_steps.get(step, {}))
    return checks


def _compare_one(where: str, recorded: Mapping[str, Any], reproduced: Mapping[str, Any]) -> list[Check]:
    """A metric the record lacks (a trainer that now reports more) is shown, not compared; one it holds must match."""
    checks = []
    for name in sorted(set(recorded) | set(reproduced)):
        skipped = "timing" if name in TIMING_METRICS else ("not recorded" if name not in recorded else "")
        checks.append(Check(where, name, _num(recorded.get(name)), _num(reproduced.get(name)), skipped))
    return checks


def comparison_text(result: Reproduction, max_rows: int = 40) -> str:
    """The comparison table (final metrics, then the steps that differ) and one verdict line."""
    mode = (
        "exact (deterministic config on CPU: values must be identical)"
        if result.exact
        else f"within relative tolerance {result.tolerance:g}"
        + ("" if result.config.get("deterministic") else " (the config is not deterministic)")
        + ("" if _runs_on_cpu(result.config) else " (the trial runs on CUDA)")
    )
    params = ", ".join(f"{k}={v}" for k, v in dict(result.config.get("params") or {}).items())
    lines = [
        f"reproducing trial {result.number} of study {result.study!r}: {result.entry}, "
        f"seed {result.config.get('seed')}, "
        f"{result.config.get('epochs')} epochs, {params}",
        f"comparison: {mode}",
        *result.notes,
        *(f"machine differs: {line}" for line in result.machine),
    ]
    final = [c for c in result.checks if c.where == "final"]
    steps = [c for c in result.checks if c.where != "final"]
    bad_steps = [c for c in steps if not c.ok(result.tolerance)]
    rows = final + bad_steps[: max(0, max_rows - len(final))]
    lines.append(_format_rows(rows, result.tolerance))
    compared_steps = sorted({c.where for c in steps})
    lines.append(
        f"per-step history: {len(compared_steps)} step(s) x metrics compared, {len(bad_steps)} value(s) differ"
        + (f" (first {max_rows - len(final)} shown)" if len(bad_steps) > max_rows - len(final) else "")
    )
    if result.error:
        lines.append(f"error: {result.error}")
    bad = result.mismatches()
    if result.matched:
        lines.append(f"MATCH: trial {result.number} reproduces its recorded metrics and history")
    else:
        what = f"{len(bad)} value(s) differ" if bad else (result.error or "see above")
        where = f"; this machine differs from the campaign's: {'; '.join(result.machine)}" if result.machine else ""
        lines.append(f"MISMATCH: trial {result.number} does not reproduce its record ({what}){where}")
    return "\n".join(lines)


def _format_rows(rows: Sequence[Check], tolerance: float) -> str:
    header = ("where", "metric", "recorded", "reproduced", "rel. diff", "")
    table = [header]
    for c in rows:
        rel = c.rel_diff()
        verdict = f"skipped ({c.skipped})" if c.skipped else ("ok" if c.ok(tolerance) else "DIFFERS")
        table.append(
            (c.where, c.metric, _show(c.recorded), _show(c.reproduced), "" if rel is None else f"{rel:.2e}", verdict)
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in table)


def _show(value: float | None) -> str:
    return "missing" if value is None else repr(value)
