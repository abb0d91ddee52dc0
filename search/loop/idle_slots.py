"""``[elastic] grow = "goodput"``: slots that sit idle (no trial waits for them beyond the reserve) go to running
trials, chosen by goodput per slot (:meth:`search.loop.elastic.ElasticGrowth.widen_idle`); each one's segment ends
at its next report (a ``resize`` stop: no verdict, so not made durable) and its next one starts wider from there.
A trial past the pruner's last rung may also take slots that come free while new trials wait
(:meth:`~search.loop.elastic.ElasticGrowth.hurry`): those slots are held from new trials until its resize begins."""

from __future__ import annotations

from collections.abc import Sequence

from search.loop.dispatch import Dispatcher
from search.loop.elastic import ElasticGrowth
from search.loop.stops import decide_stop
from search.loop.supply import TrialSupply
from search.loop.trials import RunningTrial

__all__ = ["widen_idle", "hurry_finishing"]


def widen_idle(policies: Sequence[object], dispatch: Dispatcher, supply: TrialSupply, may_start: bool) -> None:
    """Ask the ``[elastic]`` policy (``grow = "goodput"``) which running trials to widen into the idle slots, and
    ask those to stop at their next report. Nothing is looked at again while the room and the trials it may widen
    are as they were at the last look."""
    growth = next((p for p in policies if isinstance(p, ElasticGrowth)), None)
    if growth is None or not growth.idle:
        return
    hurry_finishing(growth, dispatch)
    room = dispatch.room(1, supply, may_start)
    if not growth.has_spare(room.free, room.waiting):
        return  # the common case while trials wait: no scan of the running ones
    widenable = [r for r in dispatch.running.values() if r.started_at is not None and not r.stop_reason]
    if not growth.worth_a_look(room.free, room.waiting, [(r.number, r.width) for r in widenable]):
        return
    for number, stop in growth.widen_idle([r.view() for r in widenable], room.free, room.waiting).items():
        running = dispatch.running[number]
        decide_stop(running, stop, flush=lambda: None)  # logged only: a resize is no verdict
        dispatch.request_stop(running, stop, running.reports[-1][2] if running.reports else 0.0)


def hurry_finishing(growth: ElasticGrowth, dispatch: Dispatcher) -> None:
    """Ask the ``[elastic]`` policy which trials past the pruner's last rung are to take slots before new trials
    do; hold those slots from new trials (:attr:`Dispatcher.held_back`), and once they are free ask the trial to
    stop at its next report."""
    if growth.last_rung < 1:
        return
    dispatch.held_back = growth.held_slots
    slots = dispatch.slots_total()
    free = slots - dispatch.launched()
    past = [r for r in dispatch.running.values() if _last_epoch(r) >= growth.last_rung]  # before any copy
    widenable = [r for r in past if r.started_at is not None and not r.stop_reason]
    for number, stop in growth.hurry([r.view() for r in widenable], free, slots, dispatch.now()).items():
        running = dispatch.running[number]
        decide_stop(running, stop, flush=lambda: None)  # logged only: a resize is no verdict
        dispatch.request_stop(running, stop, running.reports[-1][2] if running.reports else 0.0)


def _last_epoch(running: RunningTrial) -> float:
    return running.reports[-1][1].get("epoch", 0.0) if running.reports else 0.0
