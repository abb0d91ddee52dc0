"""The campaign's side of population-based training: members waiting at their rung, and their runs.

A member that ends a segment before its rung is complete is parked here: it stays in
the campaign (the budget counts it, ``resume`` finds it RUNNING) but holds no slot, so
the members behind it get the workers (time-sharing, as Ray Tune's PBT pauses trials).
:meth:`Barrier.step`, once per loop iteration, sends on every member of each rung the
population has decided; past the time budget the waiting members end PRUNED.

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

from search.loop.dispatch import TIME_BUDGET, Dispatcher
from search.loop.ledger import Ledger
from search.pbt.population import Population
from search.loop.policies import Verdict
from search.store.records import Attr, write_attrs
from search.store.sinks import ReportSinks
from search.loop.trials import RunningTrial

__all__ = ["Barrier", "SEGMENTS_ATTR", "EXPLOIT_METRIC"]

SEGMENTS_ATTR = Attr.PBT_SEGMENTS
EXPLOIT_METRIC = "pbt_exploit_source"  # TensorBoard/MLflow: at the exploit step, the trial whose checkpoint was copied


class Barrier:
    """Parks members at their rung and sends them on when the population has decided it."""

    def __init__(self, population: Population, dispatch: Dispatcher, ledger: Ledger, sinks: ReportSinks) -> None:
        self.population = population
        self._dispatch = dispatch
        self._ledger = ledger
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
        running.started_at, running.worker = None, ""  # not running: no trial timeout counts while it waits
        self.parked[running.number] = (running, outcome)

    def step(self, time_left: bool) -> None:
        """Send on the members of each decided rung; without time left, end the waiting ones PRUNED."""
        if not time_left:
            for number, (running, outcome) in sorted(self.parked.items()):
                self._dispatch.forget(number)
                self._ledger.finish(running, outcome, Verdict(TrialState.PRUNED, (), f"{TIME_BUDGET} (waiting at "
                                                              f"epoch {running.config.epochs})"))  # fmt: skip
            self.parked.clear()
            return
        for released in self.population.release():
            running, _outcome = self.parked.pop(released.config.number)
            if released.source is not None:
                self._sinks.record(running.number, released.epoch, {EXPLOIT_METRIC: float(released.source)},
                                   time.time())  # fmt: skip
            self._dispatch.resubmit(running, released.config)
