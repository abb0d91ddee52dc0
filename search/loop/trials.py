"""The controller's record of a trial in flight: asked and configured, then sent out.

:class:`RunningTrial` is changed only by its own methods, here (its transitions: a report kept,
a stop requested, a start, a re-run, its next segment, a kill); every other module reads it. Policies see a
:class:`TrialView`, a frozen copy, and return what to change instead of changing it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

import optuna

from search.loop.segments import Segment, Stop, current_segment, examples_seen
from search.vocab.terms import Transition
from trainers.api import TrialConfig

__all__ = ["Prepared", "RunningTrial", "TrialView", "ReportRecord"]

ReportRecord = tuple[int, dict[str, float], float]  # (step, metrics, worker time)


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A trial asked and configured, waiting for enough free slots.

    ``invalid``: why its parameters cannot run (it is told FAIL without a slot); ``config`` is then None.
    """

    trial: optuna.Trial
    config: TrialConfig | None
    width: int
    sampler_saw: int = 0  # finished trials when it was sampled
    invalid: str = ""
    fresh: bool = False  # asked now, its folder new: no earlier controller can have recorded reports for it
    segments: tuple[Segment, ...] = ()  # a resumed trial's recorded segments (its config is its last one's)
    start_epoch: int = 0  # the epoch its run resumes at (a resumed trial's: segments.resume_epoch), 0: from scratch


@dataclasses.dataclass(frozen=True)
class TrialView:
    """A frozen copy of a :class:`RunningTrial`: what a policy decides from (``trial``: to read the study)."""

    trial: optuna.Trial
    config: TrialConfig
    reports: tuple[ReportRecord, ...]
    stop_reason: str
    killed: str
    collateral: bool
    attempts: int
    requeues: int
    started_at: float | None
    width: int = 1
    stop_transition: Transition = Transition.PRUNE
    segments: tuple[Segment, ...] = ()

    @property
    def number(self) -> int:
        return self.trial.number

    def history(self) -> list[tuple[int, dict[str, float]]]:
        """Its reports as ``(step, metrics)``, in arrival order."""
        return [(step, metrics) for step, metrics, _t in self.reports]

    def segment(self) -> Segment:
        """The segment it runs now."""
        return current_segment(self.segments, self.config, self.width)

    def examples(self) -> int | None:
        """Training examples seen by its last report that counts them (None: its trainer reports none)."""
        return examples_seen(self.history())


@dataclasses.dataclass
class RunningTrial:
    """A trial the controller has sent out and not yet told."""

    trial: optuna.Trial
    config: TrialConfig
    width: int
    submitted: float
    reports: list[ReportRecord] = dataclasses.field(default_factory=list)
    report_steps: set[int] = dataclasses.field(
        default_factory=set
    )  # steps reported: a report is (trial, step), kept once
    recorded_steps: set[int] = dataclasses.field(default_factory=set)  # resources with an intermediate value
    restored: bool = False  # an earlier controller's reports (metrics.jsonl) were read back, or it has none (fresh)
    stop_reason: str = ""
    stop_transition: Transition = Transition.PRUNE  # what follows its stop (when it has a stop_reason)
    stop_trigger_time: float = 0.0  # when the report that led to the stop was sent (worker clock)
    stop_requested_at: float = 0.0
    killed: str = ""  # why its worker's processes were killed (it did not answer a time limit's stop request)
    kill_tried: bool = False
    collateral: bool = False  # its run ended because another trial's worker was killed: run again, not charged
    attempts: int = 0  # re-runs after its worker was lost while it ran
    requeues: int = 0  # re-sends after its worker was lost before it started (not charged)
    started_at: float | None = None  # when a worker began it (it may wait queued before)
    task: int = 0  # the executor task it runs in (a batch holds several trials)
    worker: str = ""  # where it started
    segments: list[Segment] = dataclasses.field(default_factory=list)  # all it began, once it ran or began a second
    start_epoch: int = 0  # the epoch its current run resumes at, as sent (segments.resume_epoch; 0: from scratch)

    @property
    def number(self) -> int:
        return self.trial.number

    def history(self) -> list[tuple[int, dict[str, float]]]:
        """Its reports as ``(step, metrics)``, in arrival order."""
        return [(step, metrics) for step, metrics, _t in self.reports]

    def view(self) -> TrialView:
        return TrialView(
            self.trial,
            self.config,
            tuple(self.reports),
            self.stop_reason,
            self.killed,
            self.collateral,
            self.attempts,
            self.requeues,
            self.started_at,
            self.width,
            self.stop_transition,
            tuple(self.segments),
        )

    def segment(self) -> Segment:
        """The segment it runs now."""
        return current_segment(self.segments, self.config, self.width)

    @property
    def pruned_reason(self) -> str:
        """Its stop reason when that stop ends it PRUNED ("" otherwise)."""
        return self.stop_reason if self.stop_reason and self.stop_transition is Transition.PRUNE else ""

    # --- its transitions (the only writers of its fields) ---------------------------------------------

    def keep_report(self, step: int, metrics: Mapping[str, float], at: float) -> bool:
        """Keep the first report of ``step``; False for a step already reported (a report is kept once)."""
        if step in self.report_steps:
            return False
        self.report_steps.add(step)
        self.reports.append((step, dict(metrics), at))
        return True

    def restore_once(self) -> bool:
        """True the first time only: an earlier controller's reports are to be read back now."""
        if self.restored:
            return False
        self.restored = True
        return True

    def recorded(self, resources: Iterable[int]) -> None:
        """Resources that have an intermediate value in the study."""
        self.recorded_steps.update(resources)

    def stop(self, stop: Stop, trigger_time: float = 0.0, requested_at: float = 0.0) -> None:
        """A stop decided (``trigger_time``: when the report behind it was sent; ``requested_at``: controller clock)."""
        self.stop_reason, self.stop_transition = stop.reason, stop.transition
        self.stop_trigger_time = trigger_time
        self.stop_requested_at = requested_at

    def began(self, at: float, worker: str) -> None:
        self.started_at, self.worker = at, worker

    def not_running(self) -> None:
        """Not running now (waiting, or sent again): no trial timeout counts until its next start."""
        self.started_at, self.worker = None, ""

    def rerun(self, config: TrialConfig) -> None:
        """Sent again with ``config`` (a retry, a population member's next segment)."""
        self.config = config
        self.not_running()

    def sent_from(self, epoch: int) -> None:
        """Its run was sent to resume at ``epoch`` (what the placement predicts it has left)."""
        self.start_epoch = epoch

    def next_segment(self, config: TrialConfig, segment: Segment) -> None:
        """Its next segment begins (a resize, a PBT member's next interval): ``config`` at ``segment.width``; a stop
        that ended the last segment (a resize decided at a report) is done with."""
        if not self.segments:
            self.segments.append(self.segment())
        self.segments.append(segment)
        self.width = segment.width
        self.stop_reason, self.stop_transition = "", Transition.PRUNE
        self.rerun(config)

    def cut_segment(self, end_epoch: int) -> None:
        """Its current segment ends at ``end_epoch``, before its planned end (its run was lost there)."""
        self.segments[-1:] = [dataclasses.replace(self.segment(), end_epoch=end_epoch)]

    def narrow_segment(self, config: TrialConfig, segment: Segment) -> None:
        """Its current segment, which ran no epoch, runs as ``segment`` with ``config`` (narrower: a worker lost)."""
        self.segments[-1:] = [segment]
        self.width = segment.width
        self.rerun(config)

    def ran(self, started: float, finished: float, worker: str) -> None:
        """One run of its current segment ended (kept in that segment's ``runs``)."""
        current = self.segment().ran((started, finished, worker))
        self.segments[-1:] = [current]

    def counted(self, requeue: bool = False, retry: bool = False) -> None:
        """A policy's re-run, counted: a free re-send (``requeue``; no longer collateral) or a ``retry``."""
        if requeue:
            self.requeues += 1
            self.collateral = False
        if retry:
            self.attempts += 1

    def in_task(self, task: int) -> None:
        self.task = task

    def kill_attempted(self) -> None:
        """A kill is tried once, whether or not the executor can do it."""
        self.kill_tried = True

    def was_killed(self, why: str) -> None:
        """Its worker's processes were killed (it did not answer a time limit's stop request)."""
        self.killed = why

    def hit_by_kill(self) -> None:
        """Another trial's worker was killed under it: its run ends, it runs again free of charge."""
        self.collateral = True
