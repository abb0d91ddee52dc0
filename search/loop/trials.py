"""The controller's record of a trial in flight: asked and configured, then sent out."""

from __future__ import annotations

import dataclasses

import optuna

from trainers.api import TrialConfig

__all__ = ["Prepared", "RunningTrial", "ReportRecord"]

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


@dataclasses.dataclass
class RunningTrial:
    """A trial the controller has sent out and not yet told."""

    trial: optuna.Trial
    config: TrialConfig
    width: int
    submitted: float
    reports: list[ReportRecord] = dataclasses.field(default_factory=list)
    report_steps: set[int] = dataclasses.field(default_factory=set)  # steps reported: a report is (trial, step), kept once
    recorded_steps: set[int] = dataclasses.field(default_factory=set)  # resources with an intermediate value
    restored: bool = False  # the reports of an earlier controller (metrics.jsonl) were read back
    stop_reason: str = ""
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

    @property
    def number(self) -> int:
        return self.trial.number

    def history(self) -> list[tuple[int, dict[str, float]]]:
        """Its reports as ``(step, metrics)``, in arrival order."""
        return [(step, metrics) for step, metrics, _t in self.reports]
