"""What a report shows, read from a campaign folder: no HTML, no plotting.

Everything here is computed from the frozen spec, the study storage, the
recorded ``environment.json`` and an optional ``scaling/`` folder, so a
report rendered anywhere describes the run, not the machine that renders it.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import tomllib
import warnings
from collections.abc import Callable, Container, Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
from optuna.trial import FrozenTrial, TrialState

from search.reports.summary import best_trials, ranking, state_counts, trial_params, trials_frame
from search.reports.timing import (  # the timeline's names, read here as before
    Span,
    TimeAxis,
    idle_gaps,
    resume_times,
    timeline,
    utilization,
    worker_labels,
)
from search.scaling.outcomes import SweepOutcomes, sweep_outcomes
from search.spec.campaign_spec import CampaignSpec, load_spec
from search.store.environment import read_environment
from search.store.folder import CampaignFolder, NoCampaignError
from search.store.heap import gc_paused
from search.store.records import TrialRecord
from search.store.storage import open_storage, storage_url
from search.store.warm_marks import own_trials
from search.vocab.terms import feasible
from spaces.batch import LRScaling
from spaces.errors import SpaceError
from spaces.params import SearchSpace

__all__ = [
    "CampaignData",
    "load_campaign",
    "Span",
    "timeline",
    "utilization",
    "epochs_spent",
    "history_of",
    "lr_schedule_points",
    "lr_curve",
    "BUILTIN_TRAINER",
    "is_builtin_trainer",
    "dataset_of",
    "MIN_IMPORTANCE_TRIALS",
    "MAX_IMPORTANCE_TRIALS",
    "importance_sample",
    "importances",
    "HistoryPoints",
    "history_points",
    "worker_labels",
    "genome_of",
    "searched_params",
    "report_frame",
]


@dataclasses.dataclass(frozen=True)
class CampaignData:
    """One campaign, loaded for reporting."""

    folder: CampaignFolder
    spec: CampaignSpec
    study: optuna.Study
    trials: tuple[FrozenTrial, ...]
    environment: dict[str, Any] | None
    scaling_dir: Path | None

    @property
    def metrics(self) -> tuple[str, ...]:
        """What the study optimises (steps to target in a sweep); the reported ones are ``spec.study.metrics``."""
        return self.spec.objective_metrics

    @property
    def directions(self) -> tuple[str, ...]:
        return self.spec.objective_directions

    @functools.cached_property
    def sweep(self) -> SweepOutcomes | None:
        """A scaling sweep's trials by outcome against the target (``None`` without ``[scaling]``)."""
        return sweep_outcomes(self.spec, self.records())

    def complete(self) -> list[FrozenTrial]:
        return [t for t in self.trials if t.state == TrialState.COMPLETE]

    def failed(self) -> list[FrozenTrial]:
        return [t for t in self.trials if t.state == TrialState.FAIL]

    def best(self, k: int = 5) -> list[FrozenTrial]:
        """The ``k`` best complete trials (single objective) or the whole Pareto front (several)."""
        ranked = best_trials(self.study, self.directions, k=k if self.sweep is None else len(self.trials))
        if self.sweep is not None:  # a sweep ranks only the trials that reached the target
            ranked = [t for t in ranked if t.number in self.sweep.reached][:k]
        return ranked

    def best_notes(self) -> list[str]:
        """How ``[study] constraints`` chose the best, and the trials that tie with it (single objective)."""
        return ranking(self.study, self.directions, k=1)[1]

    def counts(self) -> dict[str, int]:
        return state_counts(self.study)

    def records(self) -> tuple[TrialRecord, ...]:
        """Every trial's record, in ``trials`` order (built once)."""
        return self._records

    @functools.cached_property
    def _records(self) -> tuple[TrialRecord, ...]:
        with gc_paused():  # a record per trial: 100,000 in 2.7 s, in 4.7 s with collections on the way
            return tuple(TrialRecord.of(t) for t in self.trials)

    def record(self, trial: FrozenTrial | int) -> TrialRecord:
        """The record of one trial (a trial of this campaign, or its number)."""
        number = trial if isinstance(trial, int) else trial.number
        return self._by_number[number]

    @functools.cached_property
    def _by_number(self) -> dict[int, TrialRecord]:
        return {r.number: r for r in self._records}

    def asked_times(self) -> Mapping[int, float]:
        """When the controller asked each trial (Optuna's ``datetime_start``), in epoch seconds (built once)."""
        return self._asked

    @functools.cached_property
    def _asked(self) -> dict[int, float]:
        return {t.number: t.datetime_start.timestamp() for t in self.trials if t.datetime_start is not None}

    def time_axis(self, origin: float) -> TimeAxis:
        """The time axis of figures counting from ``origin``: the idle gaps between the runs of a resume cut."""
        return TimeAxis.since(origin, self._idle_gaps)

    @functools.cached_property
    def _idle_gaps(self) -> list[tuple[float, float]]:
        return idle_gaps(self.records(), resume_times(self.environment), self.asked_times())

    @property
    def builtin_trainer(self) -> bool:
        return is_builtin_trainer(self.spec.trainer.entry)


def load_campaign(path: str | Path) -> CampaignData:
    folder = CampaignFolder.existing(path)
    spec = load_spec(folder.spec, check_trainer=False)  # a report needs no trainer (nor torch)
    storage = open_storage(storage_url(spec.study.storage, folder))
    try:
        study = optuna.load_study(study_name=spec.study.name, storage=storage)
    except KeyError:
        raise NoCampaignError(f"{folder.root}: the storage holds no study {spec.study.name!r}") from None
    scaling = folder.scaling
    return CampaignData(
        folder=folder,
        spec=spec,
        study=study,
        trials=tuple(own_trials(study.get_trials(deepcopy=False))),  # not the warm-start copies
        environment=read_environment(folder.environment),
        scaling_dir=scaling if scaling.is_dir() else None,
    )


# --- per-trial facts (each takes an Optuna trial or its TrialRecord) ---------------------------

Trial = FrozenTrial | TrialRecord


def history_of(trial: Trial) -> list[tuple[int, dict[str, float]]]:
    """The trial's reports as (step, metrics) with numbers as floats ("nan" strings become NaN)."""
    return [(step, dict(metrics)) for step, metrics in TrialRecord.of(trial).history]


def epochs_spent(trial: Trial) -> float:
    """Epochs the trial trained: its last reported ``epoch`` metric, else its number of reports."""
    record = TrialRecord.of(trial)
    if record.last_report is None:
        return 0.0
    epoch = record.last_report[1].get("epoch")  # the reports before it are parsed only without an epoch
    return float(epoch) if epoch is not None and math.isfinite(epoch) else float(len(record.history))


def genome_of(trial: Trial, space: SearchSpace | None = None) -> str:
    """The trial's architecture as its canonical genome string (:func:`trial_params`'s form), "" if it has none.

    The ``genome`` a sampler recorded, else the string of each parameter searched through
    flat ``<name>.*`` parameters (several joined by a space).
    """
    record = TrialRecord.of(trial)
    if record.genome is not None:
        return record.genome
    shown = trial_params(record, space)
    names = dict.fromkeys(k.split(".", 1)[0] for k in record.params if "." in k)
    return " ".join(str(shown[n]) for n in names if n in shown)


def searched_params(trial: Trial, space: SearchSpace | None = None) -> dict[str, Any]:
    """The parameters the search chose for the trial (:func:`trial_params`'s form, fixed values left out)."""
    record = TrialRecord.of(trial)
    shown = trial_params(record, space)
    return {k: v for k, v in shown.items() if k in record.params or any(n.startswith(f"{k}.") for n in record.params)}


def lr_schedule_points(trial: Trial) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """The LR the trial followed: (schedule rebuilt per optimizer step, the ``lr`` it reported per epoch).

    The rebuild follows the built-in classifier: ``params.schedule`` at ``params.lr``
    (scaled by ``params.lr_scaling``), over the optimizer steps the trial reported,
    with ``params.warmup`` of them as warmup. Either list may be empty.
    """
    record = TrialRecord.of(trial)
    history = history_of(record)
    config = record.config or {}
    params = dict(config.get("params") or record.params)
    reported = [
        (int(m["steps"]) - 1 if "steps" in m and math.isfinite(m["steps"]) else step, m["lr"])
        for step, m in history
        if "lr" in m and math.isfinite(m["lr"])
    ]
    return _rebuild_schedule(params, history, int(config.get("epochs") or len(history))), reported


def lr_curve(trial: Trial, builtin: bool) -> tuple[list[tuple[int, float]], str]:
    """The LR to plot for one trial, and where it comes from.

    ``"reported"``: the ``lr`` metric the trainer reported, per report step (whatever
    the trainer). ``"rebuilt"``: only for the built-in trainer that reported no ``lr``,
    its schedule rebuilt from its rules (per optimizer step). ``([], "")``: neither.
    """
    record = TrialRecord.of(trial)
    reported = [(step, m["lr"]) for step, m in history_of(record) if "lr" in m and math.isfinite(m["lr"])]
    if reported:
        return reported, "reported"
    if builtin:
        rebuilt, _ = lr_schedule_points(record)
        if rebuilt:
            return rebuilt, "rebuilt"
    return [], ""


@dataclasses.dataclass(frozen=True)
class LRScaled:
    """A trial of the built-in trainer whose learning rate follows its batch size (``lr_scaling``)."""

    searched: float  # the ``lr`` parameter: the rate at the rule's base batch size
    batch_size: int
    rule: LRScaling


def lr_scaled(trial: Trial) -> LRScaled | None:
    """How the built-in trainer scaled the trial's ``lr`` to its batch size (its config's ``lr_scaling``), or None
    when it trained at the ``lr`` itself."""
    config = TrialRecord.of(trial).config or {}
    params = dict(config.get("params") or {})
    if "lr" not in params or "batch_size" not in params:
        return None
    try:
        rule = LRScaling.of_params(params)
        scaled = LRScaled(float(params["lr"]), int(params["batch_size"]), rule)
    except (SpaceError, TypeError, ValueError):
        return None
    return scaled if rule.rule != "none" else None


def _rebuild_schedule(
    params: Mapping[str, Any], history: list[tuple[int, dict[str, float]]], epochs: int
) -> list[tuple[int, float]]:
    from spaces.schedules import make_schedule

    if "lr" not in params or not history:
        return []
    steps = [m.get("steps") for _s, m in history]
    if not steps or steps[-1] is None or not math.isfinite(steps[-1]):
        return []
    per_epoch = steps[0] if steps[0] else steps[-1] / len(history)
    total = int(round(per_epoch * epochs))
    try:
        lr = float(params["lr"])
        if "batch_size" in params:
            lr = LRScaling.of_params(params)(lr, int(params["batch_size"]))
        schedule = make_schedule(
            str(params.get("schedule", "constant")),
            lr,
            total,
            warmup_steps=int(float(params.get("warmup", 0.0)) * total),
        )
    except (SpaceError, ValueError, TypeError):
        return []
    stride = max(1, total // 400)
    return [(s, float(schedule(s))) for s in range(0, total, stride)]


# --- campaign-wide facts -----------------------------------------------------------------------

BUILTIN_TRAINER = "trainers.classifier"  # the module of the built-in trainer: its rules and config are known
MIN_IMPORTANCE_TRIALS = 10  # fewer complete trials than this: importances are noise, the report skips them
MAX_IMPORTANCE_TRIALS = 5_000  # more complete trials than this: importances from a seeded sample of this many


def is_builtin_trainer(entry: str) -> bool:
    """Whether ``entry`` (``module:function``) is the built-in classifier trainer."""
    return entry.split(":", 1)[0].strip() == BUILTIN_TRAINER


def dataset_of(spec: CampaignSpec) -> str | None:
    """The dataset the trials trained on, where known: the built-in trainer's, or one the spec sets itself.

    A custom trainer gets the spec's default ``dataset`` too, but nothing says it reads it:
    the report names no dataset for it unless ``[trainer] dataset`` is written in the spec.
    """
    if is_builtin_trainer(spec.trainer.entry):
        return spec.trainer.dataset
    try:
        written = (tomllib.loads(spec.text).get("trainer") or {}).get("dataset")
    except tomllib.TOMLDecodeError:
        return None
    return str(written) if written is not None else None


@dataclasses.dataclass(frozen=True)
class HistoryPoints:
    """One objective's optimization history, every trial that ended placed on it."""

    complete: list[tuple[int, float, float]]  # (number, value, run time from the first start to its end)
    pruned: list[tuple[int, float | None]]  # (number, its last reported value of the metric, if any)
    failed: list[int]  # numbers
    cuts: list[tuple[float, float]] = dataclasses.field(default_factory=list)  # TimeAxis.marks of the time axis
    not_reached: list[int] = dataclasses.field(default_factory=list)  # a sweep's complete trials short of the target
    infeasible: list[tuple[int, float]] = dataclasses.field(
        default_factory=list
    )  # (number, value): [study] constraints


def history_points(data: CampaignData, i: int) -> HistoryPoints:
    """The ``i``-th objective's history: complete trials with their values, pruned and failed ones marked."""
    metric = data.metrics[i]
    records = data.records()
    origin = min((r.started for r in records if r.started is not None), default=0.0)
    axis = data.time_axis(origin)
    complete, pruned, failed, not_reached, infeasible = [], [], [], [], []
    breaks = {t.number for t in data.complete() if not feasible(t.constraints)}
    for r in records:
        if data.sweep is not None and r.number in data.sweep.outcomes and r.number not in data.sweep.reached:
            not_reached.append(r.number)  # told twice its steps, which are not steps to the target
        elif r.state == TrialState.COMPLETE and r.values is not None and len(r.values) > i:
            if r.number in breaks:  # a value, but not one the campaign may hand over
                infeasible.append((r.number, float(r.values[i])))
                continue
            end = r.finished if r.finished is not None else origin
            complete.append((r.number, float(r.values[i]), axis(end - origin)))
        elif r.state == TrialState.PRUNED:
            last = [m[metric] for _s, m in r.history if metric in m and math.isfinite(m[metric])]
            pruned.append((r.number, last[-1] if last else None))
        elif r.state == TrialState.FAIL:
            failed.append(r.number)
    return HistoryPoints(complete, pruned, failed, cuts=axis.marks(), not_reached=not_reached, infeasible=infeasible)


def importances(data: CampaignData) -> tuple[dict[str, dict[str, float]], str]:
    """Optuna's parameter importances per objective, and a note when they cannot be computed.

    They describe this campaign: its own complete trials, not the warm-start copies in its study.
    Under :data:`MIN_IMPORTANCE_TRIALS` complete trials nothing is computed (the note says so).
    """
    complete = data.complete()
    if len(complete) < MIN_IMPORTANCE_TRIALS:
        return {}, f"{len(complete)} complete trial(s), fewer than the {MIN_IMPORTANCE_TRIALS} importances need"
    result: dict[str, dict[str, float]] = {}
    notes = []
    study = _study_of(data.study.directions, importance_sample(complete))
    for i, metric in enumerate(data.metrics):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                target = None if len(data.metrics) == 1 else (lambda t, i=i: t.values[i])
                values = optuna.importance.get_param_importances(study, target=target)
            result[metric] = _by_parameter({str(k): float(v) for k, v in values.items()}, data.spec.space)
        except Exception as exc:  # noqa: BLE001 - any evaluator failure becomes a note in the report
            notes.append(f"{metric}: {type(exc).__name__}: {exc}")
    return result, "; ".join(notes)


def importance_sample(complete: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """The complete trials importances are computed from: all of them up to :data:`MAX_IMPORTANCE_TRIALS`, else
    that many drawn without replacement with seed 0 (the same sample at every render), in trial order. Optuna's
    evaluators cost seconds per 10,000 trials, and 5,000 trials pin importances down far past the figure's
    precision."""
    if len(complete) <= MAX_IMPORTANCE_TRIALS:
        return list(complete)
    import numpy as np

    picked = np.random.default_rng(0).choice(len(complete), MAX_IMPORTANCE_TRIALS, replace=False)
    return [complete[i] for i in sorted(picked)]


def _by_parameter(values: dict[str, float], space: SearchSpace) -> dict[str, float]:
    """Importances per spec parameter: an architecture's is the sum over its flat ``<name>.*`` parameters."""
    folded: dict[str, float] = {}
    composite = [p.name for p in space if list(p.distributions()) not in ([], [p.name])]
    for key, value in values.items():
        name = next((c for c in composite if key.startswith(f"{c}.")), key)
        folded[name] = folded.get(name, 0.0) + value
    return dict(sorted(folded.items(), key=lambda kv: -kv[1]))


def _study_of(directions: Sequence[optuna.study.StudyDirection], trials: Sequence[FrozenTrial]) -> optuna.Study:
    """A study of ``trials`` alone, read-only (made without ``create_study``, which logs that it made one): the
    trials are served as they are, not copied in one by one (minutes at 100,000 trials)."""
    storage = _FixedTrials(trials)
    name = storage.get_study_name_from_id(storage.create_new_study(directions))
    return optuna.Study(name, storage, sampler=optuna.samplers.RandomSampler(seed=0))


class _FixedTrials(optuna.storages.InMemoryStorage):
    """An in-memory storage whose study reads ``trials``: what Optuna's importance evaluators need, nothing more."""

    def __init__(self, trials: Sequence[FrozenTrial]) -> None:
        super().__init__()
        self._fixed = list(trials)

    def get_all_trials(
        self, study_id: int, deepcopy: bool = True, states: Container[TrialState] | None = None
    ) -> list[FrozenTrial]:
        trials = self._fixed if states is None else [t for t in self._fixed if t.state in states]
        return copy.deepcopy(trials) if deepcopy else list(trials)


def report_frame(data: CampaignData) -> pd.DataFrame:
    """The trials table of the report: summary columns plus seed, worker, times and epochs."""
    frame = trials_frame(data.study, data.metrics, data.records())
    if frame.empty:
        return frame
    by_number = {r.number: r for r in data.records()}
    extra: dict[str, Callable[[TrialRecord], Any]] = {
        "seed": lambda r: r.seed,
        "worker": lambda r: r.worker,
        "devices": lambda r: ",".join(map(str, r.devices)),
        "started": lambda r: r.started,
        "finished": lambda r: r.finished,
        "epochs": epochs_spent,
        "genome": lambda r: genome_of(r, data.spec.space),
    }
    for column, get in extra.items():
        frame[column] = [get(by_number[int(n)]) for n in frame["number"]]
    return frame
