"""The campaign's side of population-based training: members waiting at their rung, and their runs.

A member that ends a segment before its rung is complete is parked here: it stays in
the campaign (the budget counts it, ``resume`` finds it RUNNING) but holds no slot, so
the members behind it get the workers (time-sharing, as Ray Tune's PBT pauses trials).
:meth:`Barrier.step`, once per loop iteration, returns what the campaign does next: start the next
segment of every member of each rung the population has decided (:class:`Release`: a
:class:`~search.loop.segments.Segment` begun by ``exploit`` or ``continue``, which the campaign
starts as it starts any trial's next segment), or, past the time budget, tell the waiting members
PRUNED (:class:`Expire`).

Every run of a member (each segment, each retry) is kept as ``pbt_segments``
(``[[started, finished, worker], ...]``), so the timeline draws segments as runs and the
time between them as waiting, and a member's ``started`` is its first segment's start.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from optuna.trial import TrialState

from cluster.executor import Outcome
from search.loop.dispatch import TIME_BUDGET
from search.loop.policies import Verdict
from search.loop.segments import Segment, examples_seen, following
from search.loop.trials import RunningTrial
from search.pbt.population import Population
from search.store.records import Attr, write_attrs
from search.store.sinks import ReportSinks
from trainers.api import TrialConfig

__all__ = ["Barrier", "Release", "Expire", "SEGMENTS_ATTR", "EXPLOIT_METRIC"]

SEGMENTS_ATTR = Attr.PBT_SEGMENTS
EXPLOIT_METRIC = "pbt_exploit_source"  # TensorBoard/MLflow: at the exploit step, the trial whose checkpoint was copied


@dataclasses.dataclass(frozen=True)
class Release:
    """A parked member goes on with its next segment's ``config``, described by ``segment``."""

    running: RunningTrial
    config: TrialConfig
    segment: Segment


@dataclasses.dataclass(frozen=True)
class Expire:
    """A parked member ends: its last segment's ``outcome`` is told with ``verdict`` (out of time)."""

    running: RunningTrial
    outcome: Outcome
    verdict: Verdict


class Barrier:
    """Parks members at their rung and says which go on when the population has decided it."""

    def __init__(self, population: Population, sinks: ReportSinks) -> None:
        self.population = population
        self._sinks = sinks
        self.parked: dict[int, tuple[RunningTrial, Outcome]] = {}
        self._runs: dict[int, list[list[Any]]] = {}

    def ran(self, running: RunningTrial, outcome: Outcome) -> Outcome:
        """Record one run of a member; the outcome as the whole member's (started at its first run)."""
        runs = self._runs.get(running.number)
        if runs is None:  # after resume: the runs an earlier controller recorded
            runs = [list(r) for r in (running.trial.user_attrs.get(SEGMENTS_ATTR) or []) if len(r) == 3]
            self._runs[running.number] = runs
        if outcome.started is not None and outcome.finished is not None:
            runs.append([float(outcome.started), float(outcome.finished), outcome.worker])
            write_attrs(running.trial, **{SEGMENTS_ATTR: runs})
        if not runs:
            return outcome
        return dataclasses.replace(outcome, started=min(r[0] for r in runs))

    def park(self, running: RunningTrial, outcome: Outcome) -> None:
        running.not_running()  # no trial timeout counts while it waits
        self.parked[running.number] = (running, outcome)

    def step(self, time_left: bool) -> list[Release] | list[Expire]:
        """The members of each decided rung, to send on; without time left, every waiting one, to end PRUNED."""
        if not time_left:
            expired = [
                Expire(running, outcome, Verdict(TrialState.PRUNED, (), _waited_out(running)))
                for _number, (running, outcome) in sorted(self.parked.items())
            ]
            self.parked.clear()
            return expired
        released_now = []
        for released in self.population.release():
            running, outcome = self.parked.pop(released.config.number)
            if released.source is not None:
                self._sinks.record(
                    running.number, released.epoch, {EXPLOIT_METRIC: float(released.source)}, time.time()
                )
            examples = examples_seen([(released.epoch, outcome.metrics)]) or running.view().examples()
            segment = following(
                running.segment(), released.transition, running.config, released.config, examples, released.source
            )
            released_now.append(Release(running, released.config, segment))
        return released_now


def _waited_out(running: RunningTrial) -> str:
    return f"{TIME_BUDGET} (waiting at epoch {running.config.epochs})"
