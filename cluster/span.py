"""Trials wider than a worker: placed as parts on several workers, all of them or none.

A trial asking for more slots than the widest worker has (``data_parallel = k``) runs as
one Dask task per part, each pinned to its worker and asking for that worker's share of
the slots (:func:`plan_parts`: the workers with the most free slots first, as few as
hold ``k``). Rank 0's part hosts the rendezvous (:mod:`cluster.span_part`).

All or nothing: the parts of one wide trial are placed together, and the next wide trial
is placed only once every part of the one before has started (:class:`SpanPlacer`). A part
waiting for its slots then waits only for narrow trials, which end; two wide trials never
hold half their slots each while waiting for the other's. The trial starts (its ``Started``)
when its last part does. When any part fails, is lost with its worker, or the controller
ends the trial, every part is ended (the trial's abort event) and the trial's outcome names
the first part that failed.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .outcome import Outcome, TrialStatus

if TYPE_CHECKING:  # distributed loads with the first DaskExecutor
    from distributed import Client, Future


__all__ = ["Part", "SpanTrial", "SpanPlacer", "plan_parts", "scheduler_capacity", "merge_outcomes"]


@dataclasses.dataclass(frozen=True)
class Part:
    """One worker's share of a wide trial: ``local`` ranks from global rank ``first_rank``."""

    worker: str
    local: int
    first_rank: int


def plan_parts(capacity: Mapping[str, tuple[float, float]], width: int) -> list[Part]:
    """Parts for a trial of ``width`` slots; ``capacity``: worker -> (its slots, slots in use now).

    Workers with the most free slots come first (then the widest, then by address), each
    giving up to all its slots, until ``width`` are found. ``ValueError`` when all the
    workers together have fewer than ``width``.
    """
    total = sum(int(slots) for slots, _used in capacity.values())
    if total < width:
        raise ValueError(f"a trial of {width} slots does not fit: the {len(capacity)} workers have {total} in all")
    order = sorted(capacity, key=lambda w: (-(capacity[w][0] - capacity[w][1]), -capacity[w][0], w))
    parts: list[Part] = []
    first = 0
    for worker in order:
        take = min(int(capacity[worker][0]), width - first)
        if take > 0:
            parts.append(Part(worker, take, first))
            first += take
    return parts


def scheduler_capacity(client: Client, resource: str) -> dict[str, tuple[float, float]]:
    """Each worker's ``resource``: (declared, held by tasks assigned to it now), as the scheduler counts them.

    The probe is defined here, so it travels by value: the scheduler need not have hypersweep installed.
    """

    def probe(dask_scheduler: Any) -> dict[str, tuple[float, float]]:
        return {
            addr: (float(ws.resources.get(resource, 0)), float(ws.used_resources.get(resource, 0)))
            for addr, ws in dask_scheduler.workers.items()
        }

    return dict(client.run_on_scheduler(probe))


@dataclasses.dataclass
class SpanTrial:
    """A wide trial's parts as the controller follows them."""

    number: int
    key: str
    parts: list[Part]
    futures: list[Future] = dataclasses.field(default_factory=list)
    started: dict[int, float] = dataclasses.field(default_factory=dict)  # part -> when it began
    outcomes: dict[int, Outcome] = dataclasses.field(default_factory=dict)  # part -> its outcome
    aborted: str = ""  # why every part was told to end ('' while none was)
    first_failure: int | None = None  # the part whose failure ended the others

    @property
    def all_started(self) -> bool:
        return len(self.started) == len(self.parts)

    @property
    def done(self) -> bool:
        return len(self.outcomes) == len(self.parts)


class SpanPlacer:
    """Places wide trials one at a time (see the module docstring); ``place(request)`` submits its parts."""

    def __init__(self, place: Callable[[Any], SpanTrial]) -> None:
        self._place = place
        self._waiting: deque[Any] = deque()
        self.placing: SpanTrial | None = None
        self.trials: dict[int, SpanTrial] = {}

    def submit(self, request: Any) -> None:
        self._waiting.append(request)
        self.next()

    def next(self) -> None:
        """Place the next waiting trial, once the one being placed has all its parts started (or ended)."""
        while self._waiting:
            current = self.placing
            if current is not None and not (current.all_started or current.done or current.aborted):
                return
            trial = self._place(self._waiting.popleft())
            self.trials[trial.number] = self.placing = trial

    def forget(self, number: int) -> None:
        self.trials.pop(number, None)
        if self.placing is not None and self.placing.number == number:
            self.placing = None
        self.next()

    def waiting(self) -> list[Any]:
        return list(self._waiting)

    def drop_waiting(self, number: int) -> Any | None:
        for request in list(self._waiting):
            if request.number == number:
                self._waiting.remove(request)
                return request
        return None


def merge_outcomes(trial: SpanTrial) -> Outcome:
    """The trial's outcome from its parts': rank 0's metrics and reports; the first failure's status and error;
    every rank's timings, with its worker and part; from the first part's start to the last one's end."""
    rank0 = trial.outcomes.get(0) or Outcome(TrialStatus.LOST, error="rank 0's part left no outcome")
    changes: dict[str, Any] = {}
    if trial.first_failure is not None:
        failed = trial.outcomes[trial.first_failure]
        error = failed.error
        if error and len(trial.parts) > 1:
            error = f"part {trial.first_failure} on {trial.parts[trial.first_failure].worker}: {error}"
        changes = dict(
            status=failed.status,
            error=error,
            traceback=failed.traceback,
            disk_error=failed.disk_error,
            error_type=failed.error_type,
            oom=failed.oom,
        )
    ranks = [
        {**record, "worker": trial.parts[index].worker, "part": index}
        for index, outcome in sorted(trial.outcomes.items())
        for record in outcome.ranks
    ]
    starts = [o.started for o in trial.outcomes.values() if o.started is not None]
    ends = [o.finished for o in trial.outcomes.values() if o.finished is not None]
    return dataclasses.replace(
        rank0,
        **changes,
        ranks=tuple(sorted(ranks, key=lambda r: int(r.get("rank", 0)))),
        started=min(starts) if starts else rank0.started,
        finished=max(ends) if ends else time.time(),
    )
