"""What a running trial has left after its segment: the later segments of a trial whose segment ends at a rung.

A trial that runs in segments (``[elastic]``'s promotions at the pruner's rungs, a PBT member's intervals) ends its
run at a rung and, if it is promoted there, goes on with its next segment: a new run from its checkpoint. Its run's
end is not its end. For the expected end, each such trial's later segments are in the schedule left, each at the
chance of getting that far (:class:`Promotions`: the share promoted so far at each rung, a prior of one over the
pruner's reduction factor weighing as :data:`PRIOR_WEIGHT` decisions; without a rung pruner, a segment always goes
on), each paying its run's restart (its ranks' start-up: a new rendezvous, the checkpoint's load), learnt apart
from a fresh worker's imports (:class:`Restarts`).

The next rung is the segment's end times the reduction factor (ASHA's ladder, ``min_resource x factor^k``; without
a rung pruner, the ratio of the last segment's end to its start, else 2), capped at the trial's last epoch.
"""

from __future__ import annotations

import collections
import dataclasses
import statistics

from search.loop.elastic import RUNG_PRUNERS
from search.loop.trials import RunningTrial
from search.spec.campaign_spec import PrunerSpec, StudySpec

__all__ = ["rung_factor", "Later", "Promotions", "Restarts", "PRIOR_WEIGHT", "later_segments", "total_epochs"]

PRIOR_WEIGHT = 2.0  # the prior's weight, in rung decisions
RESTARTS = 64  # the recent restarts kept


@dataclasses.dataclass(frozen=True)
class Later:
    """A later segment of a running trial: its epochs (``start`` to ``end``), its width, and the chance it runs
    (promoted at every rung before it)."""

    start: int
    end: int
    width: int
    chance: float


def rung_factor(study: StudySpec, pruning: PrunerSpec) -> int | None:
    """The reduction factor of the campaign's rung pruner (``asha``, ``hyperband``; None: none)."""
    return pruning.reduction_factor if study.pruner in RUNG_PRUNERS else None


def total_epochs(running: RunningTrial) -> int:
    """The epochs of a trial's whole schedule (its config's ``schedule_epochs``; its ``epochs`` when it runs whole)."""
    config = running.config
    return max(config.epochs, config.schedule_epochs or config.epochs)


class Promotions:
    """The share of trials promoted at each rung (the epoch a segment ended at before the trial's last), with a
    prior of ``prior`` (``1 / reduction_factor``; 1: segments that always go on)."""

    def __init__(self, reduction_factor: int | None = None) -> None:
        self.factor = reduction_factor
        self.prior = 1.0 / reduction_factor if reduction_factor else 1.0
        self._seen: dict[int, list[int]] = {}  # rung -> [promoted, decided]

    def decided(self, running: RunningTrial, ok: bool) -> None:
        """A run ended: at a rung (its segment's end before its last epoch), its trial went on (it ended well and
        was not stopped: a resize goes on too) or did not (pruned there)."""
        rung = running.config.epochs
        if rung >= total_epochs(running) or (not ok and not running.stop_reason):
            return  # at its end, or failed or lost: no rung decision
        promoted = ok and (not running.stop_reason or running.stop_transition.value == "resize")
        seen = self._seen.setdefault(rung, [0, 0])
        seen[0] += int(promoted)
        seen[1] += 1

    def chance(self, rung: int) -> float:
        """The chance a trial at ``rung`` is promoted: the share seen there, shrunk to the prior."""
        promoted, decided = self._seen.get(rung, (0, 0))
        return (promoted + PRIOR_WEIGHT * self.prior) / (decided + PRIOR_WEIGHT)

    def next_rung(self, start: int, end: int, total: int) -> int:
        """The segment after one from ``start`` to ``end`` ends here (see the module's docstring)."""
        if self.factor:
            ratio = float(self.factor)
        else:
            ratio = end / start if start > 0 else 2.0
        return min(total, max(end + 1, round(end * ratio)))


def later_segments(running: RunningTrial, promotions: Promotions) -> list[Later]:
    """The segments a running trial may run after this one (none: it runs to its last epoch, or it is stopping)."""
    config, total = running.config, total_epochs(running)
    stopping = bool(running.stop_reason) and running.stop_transition.value != "resize"
    if config.epochs >= total or stopping:
        return []
    out, start, end, chance = [], running.segment().start_epoch, config.epochs, 1.0
    while end < total:
        chance *= promotions.chance(end)
        start, end = end, promotions.next_rung(start, end, total)
        out.append(Later(start, end, running.width, chance))
    return out


class Restarts:
    """The start-up a run pays that is not a fresh worker's imports (a later segment's ranks joining, the data's
    loading on a worker that ran before): each run pays it again."""

    def __init__(self) -> None:
        self._seen: collections.deque[tuple[int, float]] = collections.deque(maxlen=RESTARTS)

    def add(self, width: int, seconds: float) -> None:
        if seconds >= 0:
            self._seen.append((width, seconds))

    def typical(self, width: int) -> float:
        """The median restart of runs of this width (of any width where none; 0: none seen)."""
        same = [s for w, s in self._seen if w == width]
        values = same or [s for _w, s in self._seen]
        return statistics.median(values) if values else 0.0

    def __len__(self) -> int:
        return len(self._seen)
