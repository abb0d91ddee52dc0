"""The campaign's record schema: trial and study attribute names, file names, typed readers, writers.

The controller is the only writer of the study storage; everything it keeps
about a trial beyond Optuna's own fields (params, values, state, intermediate
values) is a *user attribute* named here. Readers (the report, ``status``,
``reproduce``, the benchmarks) build a :class:`TrialRecord` from a trial
instead of fishing in ``trial.user_attrs`` by string, and the names of the
files in a campaign folder live here too (:class:`Files`), so one module says
what a campaign writes and how to read it back.

Numbers in ``metrics`` and ``history`` are stored JSON-safe: finite floats as
floats, NaN and infinities as the strings ``"nan"``, ``"inf"``, ``"-inf"``
(:func:`encode_number`); readers turn them back into floats.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from optuna.trial import FrozenTrial, Trial, TrialState

from search.compat import optuna_private as op

__all__ = [
    "Attr",
    "StudyAttr",
    "Files",
    "TRIAL_ATTRS",
    "OUTCOME_ATTRS",
    "MODEL_SIZE_ATTRS",
    "CONTROLLER_FILES",
    "TrialRecord",
    "state_name",
    "write_attrs",
    "encode_number",
    "encode_metrics",
    "encode_history",
    "metrics_line",
    "append_metrics_line",
    "ends_mid_line",
    "read_metrics_lines",
    "spec_sha256_of",
]


class Attr:
    """The names of a trial's user attributes, as the controller writes them."""

    # at launch
    SEED: Final = "seed"  # int: the trial's seed (from the study seed and the trial number)
    CONFIG: Final = "config"  # dict: the TrialConfig the trainer got (params, seed, epochs, ...)
    WIDTH: Final = "width"  # int: data-parallel processes (slots) the trial takes
    SAMPLER_SAW: Final = "sampler_saw"  # int: finished trials the sampler knew when it sampled this one
    BATCH: Final = "batch"  # int: trials sent together as one task (only when > 1)
    RETRY_OF: Final = "retry_of"  # int: the failed trial this one re-runs (resume --retry-failed), its params again
    PRESET: Final = "preset_config"  # dict: set when enqueued, the TrialConfig it runs as given ([scaling.branching])
    # from the worker's outcome
    WORKER: Final = "worker"  # str: the Dask worker address
    HOST: Final = "host"  # str
    DEVICES: Final = "devices"  # list: the GPU ids leased to the trial
    STARTED: Final = "started"  # float: wall-clock seconds (epoch) the trainer started
    FINISHED: Final = "finished"  # float: ... and finished
    DURATION: Final = "duration"  # float: finished - started
    RANKS: Final = "ranks"  # list: a trial spanning several workers: each rank's {rank, worker, epoch_seconds, ...}
    STOP_LATENCY: Final = "stop_latency"  # float: stop decision -> trial stopped, seconds
    STOP_REQUESTED_AT: Final = "stop_requested_at"  # float: when the controller asked it to stop (its clock)
    METRICS: Final = "metrics"  # dict: the trainer's final metrics (encoded numbers)
    N_PARAMS: Final = "n_params"  # float: model size, where the trainer measures it
    MACS: Final = "macs"  # float
    HISTORY: Final = "history"  # list of [step, {metric: number}]: every report, in order
    REPORT_TIMES: Final = "report_times"  # list of float: each ``history`` report's time (worker clock), in order
    # why it ended, and how
    FAIL_REASON: Final = "fail_reason"  # str: one line, for FAIL trials
    ERROR_TYPE: Final = "error_type"  # str: the class of the trainer's exception (ValueError, mypkg.BadBatch)
    STOP_REASON: Final = "stop_reason"  # str: pruned, target reached, never started, ...
    STOP_DECIDED: Final = "stop_decided"  # {"reason", "step"}: a stop decided, durable before it was sent
    TRACEBACK: Final = "traceback"  # str: the failure's traceback (tail)
    INTERRUPTED: Final = "interrupted"  # bool: the controller stopped while it ran (resumable)
    HELD: Final = "held"  # str: why its next run was not started (a budget): it waits for resume with more
    RETRIES: Final = "retries"  # int: times it was re-run after losing its worker
    OUT_OF_MEMORY: Final = "out_of_memory"  # str: what ran out (CUDA or the host), one line; the trial is PRUNED
    # device figures (cluster.device_figures)
    GPU_SHARE: Final = "gpu_share"  # float: the share of each leased GPU (0.25: four trials on it)
    PEAK_MEMORY: Final = "peak_memory"  # int: peak device memory in bytes (the host's RSS without CUDA)
    MEMORY_KIND: Final = "memory_kind"  # str: what peak_memory measured, "cuda" or "rss"
    MEMORY_SHARED: Final = "memory_shared"  # int: most trials on its device at once (the peak is then shared)
    GPU_UTILIZATION: Final = "gpu_utilization"  # float: mean GPU utilization %, where NVML is there
    # architecture search and population-based training
    GENOME: Final = "genome"  # str: an architecture genome, where a sampler records one
    PBT_LINEAGE: Final = "pbt_lineage"  # list of {"epoch", "source", "params"}: whom it copied, when
    PBT_SCHEDULE: Final = "pbt_schedule"  # list of [first step, lr]: the LR it actually followed
    PBT_SEGMENTS: Final = "pbt_segments"  # older campaigns' PBT runs; now each segment's runs
    # a trial's life as segments (search.loop.segments)
    SEGMENTS: Final = "segments"  # list of Segment records (with their runs): a PBT member's, a resized trial's
    ELASTIC: Final = "elastic"  # list of dicts: each segment an [elastic] trial ended at a rung (width, batch, lr, ...)


class StudyAttr:
    """The names of the study's user attributes."""

    SPEC_SHA256: Final = "spec_sha256"  # str: sha256 of the frozen spec.toml the study was run with
    SEED: Final = "seed"  # int: the study seed
    SLOTS: Final = "slots"  # int: the cluster's slots when a controller last started (status's width for the ETA)


class Files:
    """File and folder names inside a campaign folder (``runs/<study>/``); paths: ``CampaignFolder``."""

    SPEC: Final = "spec.toml"
    SQLITE: Final = "study.db"
    JOURNAL: Final = "study.journal"
    LOCK: Final = "controller.lock"
    LOG: Final = "campaign.log"
    SUMMARY: Final = "summary.csv"
    ENVIRONMENT: Final = "environment.json"
    TRIALS: Final = "trials"  # trials/<number>/: one folder per trial
    PARAMS_LOG: Final = "trial-params.jsonl"  # every trial's parameters, a line each (search.store.trial_params)
    JOB_LOGS: Final = "jobs"  # jobs/: each SLURM/PBS job's log (SLURM: slurm-<job id>.out)
    ETA_LOG: Final = "eta.jsonl"  # the expected ends the controller worked out along the way (search.loop.eta)
    # inside trials/<number>/ (the controller's own records; the trainer writes its checkpoints beside them)
    TRIAL_METRICS: Final = "metrics.jsonl"  # one JSON object per report: step, time, worker, metrics
    TRIAL_ERROR_LOG: Final = "error.log"  # a failed trial's reason and traceback
    TRIAL_PARAMS: Final = "params.json"  # its parameters, in campaigns made before PARAMS_LOG (read only)
    # scaling/: a batch-size scaling sweep's analysis
    SCALING: Final = "scaling"
    SCALING_TABLE: Final = "scaling.csv"
    SCALING_CONCLUSION: Final = "conclusion.txt"
    # branching/: a sweep's [scaling.branching] study, a campaign folder of its own (search.session.branching)
    BRANCHING: Final = "branching"
    BRANCHING_SUMMARY: Final = "summary.json"  # inside branching/: what it measured, written when it is done
    # report/: ``hypersweep report``
    REPORT: Final = "report"
    REPORT_HTML: Final = "index.html"
    REPORT_MARKDOWN: Final = "report.md"
    REPORT_CSV: Final = "trials.csv"
    REPORT_PARQUET: Final = "trials.parquet"


def _constants(cls: type) -> frozenset[str]:
    return frozenset(v for k, v in vars(cls).items() if k.isupper() and isinstance(v, str))


TRIAL_ATTRS: Final = _constants(Attr)
OUTCOME_ATTRS: Final = (Attr.WORKER, Attr.HOST, Attr.DEVICES, Attr.STARTED, Attr.FINISHED)  # copied from the outcome
MODEL_SIZE_ATTRS: Final = (Attr.N_PARAMS, Attr.MACS)  # copied from the final metrics, where present
CONTROLLER_FILES: Final = frozenset(
    {Files.TRIAL_METRICS, Files.TRIAL_ERROR_LOG, Files.TRIAL_PARAMS}
)  # in trials/<n>/, not the trainer's


# --- writing -----------------------------------------------------------------------------------


def write_attrs(trial: Any, /, **fields: Any) -> None:
    """Set user attributes of ``trial`` (an ``optuna.Trial``), by their :class:`Attr` names, in order.

    ``write_attrs(trial, seed=3, config=config, width=1)``. An unknown name raises
    :class:`TypeError` before anything is written; values are stored as given
    (encode numbers with :func:`encode_metrics` / :func:`encode_history`).
    """
    unknown = sorted(set(fields) - TRIAL_ATTRS)
    if unknown:
        raise TypeError(f"unknown trial attribute(s) {', '.join(unknown)} (see search.store.records.Attr)")
    if len(fields) >= 2 and isinstance(trial, Trial) and op.keep_user_attrs(trial, fields):
        return  # the controller's journal: one append
    for key, value in fields.items():
        trial.set_user_attr(key, value)


def encode_number(value: float) -> float | str:
    """A number as JSON can hold it: finite floats as they are, NaN and infinities as strings."""
    value = float(value)
    return value if math.isfinite(value) else str(value)


def encode_metrics(metrics: Mapping[str, float]) -> dict[str, float | str]:
    """A metrics dict JSON-safe (:func:`encode_number` on every value)."""
    return {str(k): encode_number(v) for k, v in metrics.items()}


def encode_history(reports: Iterable[Sequence[Any]]) -> list[list[Any]]:
    """``[[step, {metric: number}], ...]`` from ``(step, metrics, ...)`` tuples (extra items are dropped)."""
    return [[report[0], encode_metrics(report[1])] for report in reports]


def metrics_line(step: int, metrics: Mapping[str, float], at: float, worker: str = "") -> str:
    """One line of ``trials/<n>/metrics.jsonl`` (with its newline)."""
    record = {"step": step, "time": at, "worker": worker, **encode_metrics(metrics)}
    return json.dumps(record) + "\n"


def append_metrics_line(path: str | Path, step: int, metrics: Mapping[str, float], at: float, worker: str = "") -> None:
    """Append one report to a trial's ``metrics.jsonl`` (on a line of its own, after a torn last line too)."""
    line = metrics_line(step, metrics, at, worker).encode()
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)  # os calls: 4 per report, no io objects
    except FileNotFoundError:  # the trial's folder is not made yet (it is made where the trial runs)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        if ends_mid_line(fd):
            line = b"\n" + line  # the torn line stays, on a line of its own; the reader skips it
        os.write(fd, line)
    finally:
        os.close(fd)


def ends_mid_line(fd: int) -> bool:
    """Whether the file open at ``fd`` ends inside a line (a write torn by a crash): what is appended next must
    start with a newline, so that it is a line of its own."""
    end = os.fstat(fd).st_size
    return end > 0 and os.pread(fd, 1, end - 1) != b"\n"


# --- reading -----------------------------------------------------------------------------------


def read_metrics_lines(path: Path) -> list[tuple[int, dict[str, float], float]]:
    """The reports in a trial's ``metrics.jsonl`` as ``(step, metrics, time)``; none if there is no file.

    A line that is not a whole report (torn by a crash mid-write) is skipped.
    """
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    reports = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
            step, at = int(record.pop("step")), float(record.pop("time"))
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
        record.pop("worker", None)
        reports.append((step, {str(k): _float(v) for k, v in record.items()}, at))
    return reports


def _float(value: Any) -> float:
    """A recorded number as a float; ``"nan"``/``"inf"`` strings as such, anything else unreadable as NaN."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _opt_float(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _opt_int(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _history(raw: Any) -> tuple[tuple[int, dict[str, float]], ...]:
    """Recorded reports as (step, metrics) with numbers as floats; malformed entries are skipped."""
    rows = []
    for item in raw or []:
        try:
            step, metrics = item
            rows.append((int(step), _metric_floats(dict(metrics))))
        except (TypeError, ValueError):
            continue
    return tuple(rows)


def _metric_floats(metrics: dict[Any, Any]) -> dict[str, float]:
    """``{name: float}``: in C (``map``) for the usual numbers and "nan" strings, else value by value."""
    try:
        return dict(zip(map(str, metrics), map(float, metrics.values()), strict=True))
    except (TypeError, ValueError):
        return {str(k): _float(v) for k, v in metrics.items()}


def _schedule(raw: Any) -> tuple[tuple[int, float], ...]:
    """A recorded piecewise schedule ``[[first step, lr], ...]``; malformed entries are skipped."""
    points = []
    for item in raw or []:
        try:
            step, lr = item
            points.append((int(step), float(lr)))
        except (TypeError, ValueError):
            continue
    return tuple(points)


def _segments(raw: Any) -> tuple[tuple[float, float, str], ...]:
    """Recorded runs ``[[started, finished, worker], ...]``; malformed entries are skipped."""
    runs = []
    for item in raw or []:
        try:
            started, finished, worker = item
            runs.append((float(started), float(finished), str(worker)))
        except (TypeError, ValueError):
            continue
    return tuple(runs)


@dataclasses.dataclass(frozen=True)
class TrialRecord:
    """One trial as the controller recorded it, typed; build it with :meth:`TrialRecord.of`.

    A missing attribute reads as ``None`` (numbers, ``config``, ``metrics``,
    ``genome``), ``""`` (reasons, traceback), ``False`` or ``0`` or ``()``.
    ``metrics`` and :attr:`history` hold floats (``"nan"`` strings become NaN);
    the history is parsed when first read (``recorded_history`` is it as stored).
    """

    number: int
    state: TrialState
    params: dict[str, Any]  # Optuna's params (flat, as sampled)
    values: tuple[float, ...] | None
    seed: int | None = None
    config: dict[str, Any] | None = None
    width: int | None = None
    sampler_saw: int | None = None
    batch: int | None = None
    worker: str | None = None
    host: str | None = None
    devices: tuple[Any, ...] = ()
    started: float | None = None
    finished: float | None = None
    duration: float | None = None
    stop_latency: float | None = None
    stop_requested_at: float | None = None
    metrics: dict[str, float] | None = None
    n_params: float | None = None
    macs: float | None = None
    recorded_history: tuple[Any, ...] = dataclasses.field(default=(), repr=False)  # as stored; see ``history``
    report_times: tuple[Any, ...] = dataclasses.field(default=(), repr=False)  # as stored: each report's time
    fail_reason: str = ""
    error_type: str = ""
    stop_reason: str = ""
    traceback: str = ""
    interrupted: bool = False
    held: str = ""
    retries: int = 0
    out_of_memory: str = ""
    gpu_share: float | None = None
    peak_memory: int | None = None
    memory_kind: str = ""
    memory_shared: int | None = None
    gpu_utilization: float | None = None
    genome: str | None = None
    pbt_lineage: tuple[dict[str, Any], ...] = ()
    pbt_schedule: tuple[tuple[int, float], ...] = ()
    pbt_segments: tuple[tuple[float, float, str], ...] = ()  # an older campaign's PBT runs (now each segment's runs)
    segments: tuple[dict[str, Any], ...] = ()  # each segment it began (search.loop.segments.Segment records)

    @classmethod
    def of(cls, trial: FrozenTrial | TrialRecord) -> TrialRecord:
        """The record of an Optuna trial (a record is returned as it is)."""
        if isinstance(trial, TrialRecord):
            return trial
        a = trial.user_attrs
        config = a.get(Attr.CONFIG)
        metrics = a.get(Attr.METRICS)
        return cls(
            number=trial.number,
            state=trial.state,
            params=dict(trial.params),
            values=tuple(trial.values) if trial.values is not None else None,
            seed=_opt_int(a.get(Attr.SEED)),
            config=dict(config) if isinstance(config, Mapping) else None,
            width=_opt_int(a.get(Attr.WIDTH)),
            sampler_saw=_opt_int(a.get(Attr.SAMPLER_SAW)),
            batch=_opt_int(a.get(Attr.BATCH)),
            worker=None if a.get(Attr.WORKER) is None else str(a[Attr.WORKER]),
            host=None if a.get(Attr.HOST) is None else str(a[Attr.HOST]),
            devices=tuple(a.get(Attr.DEVICES) or ()),
            started=_opt_float(a.get(Attr.STARTED)),
            finished=_opt_float(a.get(Attr.FINISHED)),
            duration=_opt_float(a.get(Attr.DURATION)),
            stop_latency=_opt_float(a.get(Attr.STOP_LATENCY)),
            stop_requested_at=_opt_float(a.get(Attr.STOP_REQUESTED_AT)),
            metrics={str(k): _float(v) for k, v in metrics.items()} if isinstance(metrics, Mapping) else None,
            n_params=_opt_float(a.get(Attr.N_PARAMS)),
            macs=_opt_float(a.get(Attr.MACS)),
            recorded_history=tuple(a.get(Attr.HISTORY) or ()),
            report_times=tuple(a.get(Attr.REPORT_TIMES) or ()),
            fail_reason=str(a.get(Attr.FAIL_REASON) or ""),
            error_type=str(a.get(Attr.ERROR_TYPE) or ""),
            stop_reason=str(a.get(Attr.STOP_REASON) or ""),
            traceback=str(a.get(Attr.TRACEBACK) or ""),
            interrupted=bool(a.get(Attr.INTERRUPTED)),
            held=str(a.get(Attr.HELD) or ""),
            retries=_opt_int(a.get(Attr.RETRIES)) or 0,
            out_of_memory=str(a.get(Attr.OUT_OF_MEMORY) or ""),
            gpu_share=_opt_float(a.get(Attr.GPU_SHARE)),
            peak_memory=_opt_int(a.get(Attr.PEAK_MEMORY)),
            memory_kind=str(a.get(Attr.MEMORY_KIND) or ""),
            memory_shared=_opt_int(a.get(Attr.MEMORY_SHARED)),
            gpu_utilization=_opt_float(a.get(Attr.GPU_UTILIZATION)),
            genome=None if a.get(Attr.GENOME) is None else str(a[Attr.GENOME]),
            pbt_lineage=tuple(dict(x) for x in (a.get(Attr.PBT_LINEAGE) or ()) if isinstance(x, Mapping)),
            pbt_schedule=_schedule(a.get(Attr.PBT_SCHEDULE)),
            pbt_segments=_segments(a.get(Attr.PBT_SEGMENTS)),
            segments=tuple(dict(x) for x in (a.get(Attr.SEGMENTS) or ()) if isinstance(x, Mapping)),
        )

    @functools.cached_property
    def history(self) -> tuple[tuple[int, dict[str, float]], ...]:
        """Every report as (step, metrics), in order; malformed entries are skipped."""
        return _history(self.recorded_history)

    @functools.cached_property
    def last_report(self) -> tuple[int, dict[str, float]] | None:
        """The last well-formed report, ``history[-1]``, found without parsing the reports before it."""
        for item in reversed(self.recorded_history):
            parsed = _history((item,))
            if parsed:
                return parsed[0]
        return None

    @property
    def state_name(self) -> str:
        """The state's name, with ``INTERRUPTED`` for a RUNNING trial whose controller stopped."""
        return state_name(self)

    @property
    def reason(self) -> str:
        """Why it ended other than COMPLETE: the failure, else the stop reason, else ``""``."""
        return self.fail_reason or self.stop_reason

    @property
    def timed(self) -> bool:
        """Whether it recorded both its start and its end."""
        return self.started is not None and self.finished is not None

    @property
    def trainer_params(self) -> dict[str, Any]:
        """The parameters the trainer got (genomes as their strings), else Optuna's flat ones."""
        if self.config is not None and isinstance(self.config.get("params"), dict):
            return dict(self.config["params"])
        return dict(self.params)


def spec_sha256_of(study: Any) -> str | None:
    """The spec hash the study recorded (``StudyAttr.SPEC_SHA256``), or ``None``."""
    value = study.user_attrs.get(StudyAttr.SPEC_SHA256)
    return None if value is None else str(value)


def state_name(trial: FrozenTrial | TrialRecord) -> str:
    """The state's name, with ``INTERRUPTED`` for a RUNNING trial whose controller stopped and ``HELD`` for one whose
    next run a budget did not start (without building the trial's whole record: ``status`` counts 100,000 trials
    with it)."""
    if trial.state != TrialState.RUNNING:
        return trial.state.name
    if trial.held if isinstance(trial, TrialRecord) else trial.user_attrs.get(Attr.HELD):
        return "HELD"
    interrupted = trial.interrupted if isinstance(trial, TrialRecord) else bool(trial.user_attrs.get(Attr.INTERRUPTED))
    return "INTERRUPTED" if interrupted else trial.state.name
