"""A trial's next run, through the gates its first run went through: its next segment (a resize, a PBT member's next
interval, a promotion at an elastic rung) or a retry from its checkpoint (a lost worker, a collateral kill).

Each is sent only where its first run would have been (:meth:`~search.loop.cost_gates.CostGates.refuses`):
with a time budget, when it is predicted to end within the time left; with a resource budget, when its predicted
cost fits in what is left. Both predict what the run has left from the epoch it resumes at
(:func:`~search.loop.segments.resume_epoch`), not a whole trial (:meth:`~search.loop.costs.TrialCosts.rests`).
The batch job's walltime is checked where the run is placed, as for a first run (:mod:`cluster.walltimes`).

A run that does not fit is not started, as a job whose budget is spent is not: one line says which trial and why,
and the trial is **held**: it stays RUNNING in the study with its segment and config recorded and its checkpoint
kept (``held``: the line; ``interrupted``), so ``hypersweep resume`` with more budget continues it from that
checkpoint, and nothing it trained is lost or trained again. ``status`` and the report count it as held, not
failed or pruned. A PBT population waits for its members: once one is held, every member that reaches its rung
(or waits there) is held with it, since the rung can no longer be decided.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from cluster.executor import Outcome
from search.loop.barrier import Barrier
from search.loop.cost_gates import CostGates
from search.loop.dispatch import Dispatcher, Room
from search.loop.policies import Resubmit
from search.loop.segment_records import begin_segment, retry_within_room
from search.loop.segments import Segment, resume_epoch
from search.loop.trials import RunningTrial
from search.store.records import Attr, write_attrs
from trainers.api import TrialConfig

__all__ = ["NextRuns"]

log = logging.getLogger(__name__)


class NextRuns:
    """Sends trials' next runs through the campaign's gates; holds those that do not fit (see the module's
    docstring). ``held``: the trials held in this run of the campaign, with their lines."""

    def __init__(
        self,
        dispatch: Dispatcher,
        gates: CostGates,
        barrier: Barrier | None,
        policies: Sequence[object],
        sync: Callable[[], object],
        notice: Callable[[str], None],
    ) -> None:
        self._dispatch, self._gates, self._barrier = dispatch, gates, barrier
        self._policies, self._sync, self._notice = policies, sync, notice
        self.held: dict[int, str] = {}

    def segment(self, running: RunningTrial, config: TrialConfig, segment: Segment, room: Room) -> None:
        """The trial's next segment, recorded (on disk before it is acted on: a controller killed now resumes the
        trial in this segment), then sent, or held."""
        config = begin_segment(running, config, segment, room, self._policies)  # [elastic] shrink: for waiting trials
        self._sync()
        self._send(running, config)

    def retry(self, running: RunningTrial, decision: Resubmit) -> None:
        """The trial again from its checkpoint (narrower where ``[elastic]`` allows it and a worker was lost), or
        held."""
        running.counted(requeue=decision.requeue, retry=decision.retry)
        slots = self._dispatch.slots_total()
        config = retry_within_room(running, decision.config, slots, self._policies, self._sync)
        self._send(running, config)

    def park(self, running: RunningTrial, outcome: Outcome) -> None:
        """A PBT member at its rung waits there for the others, holding no slot; with a member held, it is held."""
        assert self._barrier is not None
        if self.held:
            self._hold_members([running], running.config)
        else:
            self._barrier.park(running, outcome)

    def _send(self, running: RunningTrial, config: TrialConfig) -> None:
        if self._barrier is not None and self.held:  # its population waits for a held member
            self._hold_members([running], config)
            return
        start = resume_epoch(running.segment(), config, running.history())
        refused = self._gates.refuses(running, config, start)
        if not refused:
            self._dispatch.resubmit(running, config)
            return
        self._hold(running, config, f"{refused}: it is not started and is held at epoch {start} (its checkpoint is "
                   "kept; 'hypersweep resume' with more budget continues it)")  # fmt: skip
        if self._barrier is not None:  # its population's rung cannot be decided now: the members there wait with it
            parked = [r for r, _outcome in self._barrier.parked.values()]
            self._barrier.parked.clear()
            self._hold_members(parked, None)

    def _hold_members(self, members: list[RunningTrial], config: TrialConfig | None) -> None:
        """PBT members held with the first one held (one line says so, once)."""
        if not members:
            return
        first = next(iter(self.held))
        line = (
            f"trial {first}'s population waits for it: its members that reach their rung are held there too "
            "('hypersweep resume' continues them)"
        )
        for running in members:
            self._hold(running, config or running.config, line, say=line not in self.held.values())

    def _hold(self, running: RunningTrial, config: TrialConfig, line: str, say: bool = True) -> None:
        """Not started: left RUNNING, resumable, with why (:data:`~search.store.records.Attr.HELD`)."""
        write_attrs(running.trial, **{Attr.CONFIG: config.to_dict(), Attr.INTERRUPTED: True, Attr.HELD: line})
        self._dispatch.forget(running.number)
        self.held[running.number] = line
        self._sync()
        if say:
            log.warning(line)
            self._notice(line)
