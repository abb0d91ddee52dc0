"""The campaign's side of population-based training: members waiting at their rung, and their runs.

A member that ends a segment before its rung is complete is parked here: it stays in
the campaign (the budget counts it, ``resume`` finds it RUNNING) but holds no slot, so
the members behind it get the workers (time-sharing, as Ray Tune's PBT pauses trials).
:meth:`Barrier.step`, once per loop iteration, returns what the campaign does next: start the next
segment of every member of each rung the population has decided (:class:`Release`: a
:class:`~search.loop.segments.Segment` begun by ``exploit`` or ``continue``, which the campaign
starts as it starts any trial's next segment), or, past the time budget, tell the waiting members
PRUNED (:class:`Expire`). With ``[elastic] grow = "pbt"`` the survivors of a decided rung (members that go on
with their own checkpoint) may widen into the slots the population's next segments leave idle, chosen for the
whole rung at once by goodput per slot (:meth:`~search.loop.elastic.ElasticGrowth.widen_survivors`): such a
segment is a ``resize`` at the new width; an exploiting member keeps its width.

Every run of a member (each segment, each retry) is kept in its segment's ``runs`` (the trial's
``segments``, recorded by the campaign), so the timeline draws segments as runs and the
time between them as waiting, and a member's ``started`` is its first segment's first run.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from optuna.trial import TrialState

from cluster.executor import Outcome
from search.loop.dispatch import TIME_BUDGET, Room
from search.loop.elastic import ElasticGrowth
from search.loop.policies import Verdict
from search.loop.segments import Segment, examples_seen, following
from search.loop.trials import RunningTrial
from search.pbt.population import Population
from search.store.sinks import ReportSinks
from search.vocab.terms import Transition
from trainers.api import TrialConfig

__all__ = ["Barrier", "Release", "Expire", "EXPLOIT_METRIC", "widened"]

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

    def __init__(self, population: Population, sinks: ReportSinks, policies: Sequence[object] = ()) -> None:
        self.population = population
        self._sinks = sinks
        growth = next((p for p in policies if isinstance(p, ElasticGrowth)), None)
        self._growth = growth if growth is not None and growth.pbt else None  # [elastic] grow = "pbt"
        self.parked: dict[int, tuple[RunningTrial, Outcome]] = {}

    def ran(self, running: RunningTrial, outcome: Outcome) -> Outcome:
        """The outcome of a member's run as the whole member's: started at its first segment's first run."""
        starts = [run[0] for segment in running.segments for run in segment.runs]
        return dataclasses.replace(outcome, started=min(starts)) if starts else outcome

    def park(self, running: RunningTrial, outcome: Outcome) -> None:
        running.not_running()  # no trial timeout counts while it waits
        self.parked[running.number] = (running, outcome)

    def step(self, time_left: bool, room: Callable[[], Room] | None = None) -> list[Release] | list[Expire]:
        """The members of each decided rung, to send on; without time left, every waiting one, to end PRUNED.
        ``room``: the cluster's room now (its free slots), asked only when a rung was decided and survivors may
        widen (``[elastic] grow = "pbt"``)."""
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
        if self._growth is None or room is None or not released_now:
            return released_now
        return widened(released_now, self._growth, room())


def widened(releases: Sequence[Release], growth: ElasticGrowth, room: Room) -> list[Release]:
    """``releases`` (the next segments of a decided rung's members) with the survivors ``growth`` widens into the
    ``room``'s free slots less those all the next segments take: each one a ``resize`` at its new width."""
    free = room.free - sum(r.segment.width for r in releases)
    survivors = [r.running.view() for r in releases if r.segment.transition is Transition.CONTINUE]
    chosen = growth.widen_survivors(survivors, free, room.waiting)
    return [_resized(r, chosen[r.running.number]) if r.running.number in chosen else r for r in releases]


def _resized(release: Release, width: int) -> Release:
    config = dataclasses.replace(release.config, data_parallel=width)
    segment = dataclasses.replace(release.segment, width=width, transition=Transition.RESIZE)
    return dataclasses.replace(release, config=config, segment=segment)


def _waited_out(running: RunningTrial) -> str:
    return f"{TIME_BUDGET} (waiting at epoch {running.config.epochs})"
