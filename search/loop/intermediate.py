"""Reports as they stream in: each lands in the trial's ``metrics.jsonl`` and becomes an Optuna
intermediate value (keyed by the pruning resource), and the pruner is set up from the first one.
The ledger records them all in the study when it tells the trial (``history``, ``report_times``): from
then on that is their record, and the file is derived from it (:mod:`search.store.trial_reports`).

A report the event stream had not delivered by the time its trial ended comes with the
outcome's history and is replayed here, so neither the file nor the study misses a step.
A trial run again from its checkpoint (a retry, or after ``resume``) sends the reports the
checkpoint covers again: a report is identified by its trial and step, never by its content
(a re-sent copy differs in ``epoch_seconds`` and the like), and the first one kept for a step
wins; so one lost with a dying worker fills its gap and every other copy is dropped. After ``resume``, a trial's earlier reports are read
back from its ``metrics.jsonl`` (and any the study missed are told to it) before the first new one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping

import optuna

from search.compat import optuna_private as op
from search.loop.trials import RunningTrial
from search.sampling.pruning import install_pruner, resource_of
from search.spec.campaign_spec import PrunerSpec, StudySpec
from search.store.folder import CampaignFolder
from search.store.records import append_metrics_line, read_metrics_lines
from search.store.sinks import ReportSinks

__all__ = ["IntermediateValues"]

log = logging.getLogger(__name__)


class IntermediateValues:
    """Records every report of a running trial, once, in the trial's folder and in the study."""

    def __init__(
        self,
        spec: StudySpec,
        pruning: PrunerSpec,
        study: optuna.Study,
        folder: CampaignFolder,
        sinks: ReportSinks | None = None,
    ) -> None:
        self._spec = spec
        self._pruning = pruning
        self._sinks = sinks or ReportSinks()  # TensorBoard, MLflow: every report kept goes there too
        self._study = study
        self._folder = folder
        # the spec's pruner, whoever created the study; asha and hyperband without min_resource prune nothing
        # until the first report sets their rung size
        self._pruner_ready = install_pruner(study, spec.pruner, pruning)

    def record(self, running: RunningTrial, step: int, metrics: Mapping[str, float], at: float, worker: str) -> None:
        """Keep a report, unless the trial already reported this step (the first copy of a step wins)."""
        self.restore(running)
        if not self._remember(running, step, metrics, at):
            return
        self._append_file(running.number, step, metrics, at, worker)
        self._sinks.record(running.number, step, metrics, at)
        self._report_value(running, step, metrics)

    def replay(self, running: RunningTrial, history: Iterable[tuple[int, Mapping[str, float], float]]) -> None:
        """Record the reports of ``history`` not seen as events."""
        self.restore(running)
        for step, metrics, at in history:
            self.record(running, int(step), metrics, float(at), "")

    def _remember(self, running: RunningTrial, step: int, metrics: Mapping[str, float], at: float) -> bool:
        """Whether this is the trial's first report of ``step`` (then it joins the trial's reports)."""
        return running.keep_report(step, metrics, at)

    def restore(self, running: RunningTrial) -> None:
        """Once per trial: the reports an earlier controller recorded (``resume``), from the trial's file.

        The study is told those it lacks (its journal may have lost the last writes before a crash).
        """
        if not running.restore_once():
            return
        earlier = read_metrics_lines(self._folder.trial_metrics(running.number))
        if not earlier:
            return
        frozen = op.storage_of(self._study).get_trial(op.trial_id(running.trial))
        running.recorded(frozen.intermediate_values)
        for step, metrics, at in earlier:
            if self._remember(running, step, metrics, at):
                self._report_value(running, step, metrics)

    def should_prune(self, trial: optuna.Trial) -> bool:
        return self._pruner_ready and trial.should_prune()

    def _report_value(self, running: RunningTrial, step: int, metrics: Mapping[str, float]) -> None:
        if self._spec.multi_objective:
            return
        value = metrics.get(self._spec.metrics[0])
        if value is None or not math.isfinite(value):
            return
        resource = resource_of(step, metrics, self._pruning.resource)
        if resource in running.recorded_steps:
            return
        running.recorded((resource,))
        running.trial.report(float(value), resource)
        self._ensure_pruner(resource)

    def _ensure_pruner(self, first_resource: int) -> None:
        if self._pruner_ready:
            return
        self._pruner_ready = install_pruner(self._study, self._spec.pruner, self._pruning, first_resource)
        log.info("pruner %s: a rung is %d %s", self._spec.pruner, first_resource, self._pruning.resource)

    def _append_file(self, number: int, step: int, metrics: Mapping[str, float], at: float, worker: str) -> None:
        append_metrics_line(self._folder.trial_metrics_file(number), step, metrics, at, worker)
