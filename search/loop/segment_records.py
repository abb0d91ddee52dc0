"""A trial's segments as the loop records them: each run kept in its segment, the list written on the trial (the
report's timeline draws it run by run; ``resume`` continues in the last segment), a next segment kept within
the workers' room (narrower where new trials wait: ``[elastic] shrink``), and a lost run's retry narrowed to the
workers left (``[elastic]``)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence

from cluster.outcome import Outcome
from search.loop.dispatch import Room
from search.loop.elastic import ElasticGrowth
from search.loop.policies import NextSegment
from search.loop.segments import Segment
from search.loop.trials import RunningTrial
from search.store.records import Attr, write_attrs
from search.vocab.terms import Transition
from trainers.api import TrialConfig

__all__ = ["record_run", "record_segments", "within_room", "begin_segment", "retry_within_room"]

log = logging.getLogger(__name__)


def record_segments(running: RunningTrial) -> None:
    """The trial's segments (and their runs) written on its study record."""
    write_attrs(running.trial, **{Attr.SEGMENTS: [s.to_record() for s in running.segments]})


def record_run(running: RunningTrial, outcome: Outcome, population: bool) -> None:
    """A run ended: kept in its segment's ``runs``; recorded for a trial in segments (a PBT member's every run,
    ``population``, a resized trial's)."""
    if outcome.started is None or outcome.finished is None:
        return
    running.ran(outcome.started, outcome.finished, outcome.worker)
    if len(running.segments) > 1 or population:
        record_segments(running)


def within_room(
    running: RunningTrial, config: TrialConfig, segment: Segment, room: Room, policies: Sequence[object] = ()
) -> tuple[TrialConfig, Segment]:
    """The next segment as it can run: one wider than all the workers together goes on at the width the trial had,
    said in a warning; with ``[elastic] shrink``, a grown trial's narrower where trials wait for slots that the
    free ones cannot hold beside it, with ``grow = "goodput"`` wider into idle slots (:meth:`ElasticGrowth.fit_room`)."""
    growth = next((p for p in policies if isinstance(p, ElasticGrowth)), None)
    if growth is not None:
        step = growth.fit_room(running.view(), NextSegment(config, segment), room.free, room.waiting)
        if step.segment.width != segment.width:
            log.info(
                "trial %d: %d slot(s) free, trials wait for %d; on at %d",
                running.number,
                room.free,
                room.waiting,
                step.segment.width,
            )
        config, segment = step.config, step.segment
    if room.fits:
        return config, segment
    width, kept = segment.width, running.width
    log.warning("trial %d: the workers have no room for %d slots; it goes on at %d", running.number, width, kept)
    how = Transition.CONTINUE if kept == running.segment().width else segment.transition  # no resize after all
    return dataclasses.replace(config, data_parallel=kept), dataclasses.replace(segment, width=kept, transition=how)


def begin_segment(
    running: RunningTrial, config: TrialConfig, segment: Segment, room: Room, policies: Sequence[object] = ()
) -> TrialConfig:
    """The trial's next segment begins, :func:`within_room`, and is recorded on the trial: the config it runs. One
    that starts before the current one's planned end (a resize stop at a report) cuts it there."""
    config, segment = within_room(running, config, segment, room, policies)
    current = running.segment()
    if current.start_epoch < segment.start_epoch < current.end_epoch:
        running.cut_segment(segment.start_epoch)
    running.next_segment(config, segment)
    record_segments(running)
    return config


def retry_within_room(
    running: RunningTrial, config: TrialConfig, room: int, policies: Sequence[object], sync: Callable[[], object]
) -> TrialConfig:
    """The config a retry runs: ``config``, or, where the trial is wider than the ``room`` the workers left have
    (``room`` < 1: none known) and an ``[elastic]`` policy allows a narrower width, its segment cut at its last
    report and a narrower one begun from that checkpoint (recorded, and on disk before it is sent); a segment that
    ran no epoch is narrowed itself."""
    growth = next((p for p in policies if isinstance(p, ElasticGrowth)), None)
    narrower = growth.narrower_retry(running.view(), room) if growth is not None and room >= 1 else None
    if narrower is None:
        return config
    cut, step = narrower
    log.warning(
        "trial %d: %d slot(s) left for its %d; retried from epoch %d at %d",
        running.number, room, running.width, cut, step.segment.width,
    )  # fmt: skip
    current = running.segment()
    if cut > current.start_epoch:
        running.cut_segment(cut)
        running.next_segment(step.config, step.segment)
    else:  # no epoch ran at the wide width (a resumed trial the workers left cannot place): the segment narrows
        running.narrow_segment(step.config, _narrowed(running, current, step.segment))
    record_segments(running)
    sync()
    return step.config


def _narrowed(running: RunningTrial, current: Segment, step: Segment) -> Segment:
    """``current`` at ``step``'s width with its overrides; a ``continue`` where that is the width before it."""
    before = running.segments[-2].width if len(running.segments) > 1 else None
    how = Transition.CONTINUE if before == step.width else current.transition
    overrides = {**current.overrides, **step.overrides}
    return dataclasses.replace(current, width=step.width, overrides=overrides, transition=how)
