"""A trial's segments as the loop records them: each run kept in its segment, the list written on the trial (the
report's timeline draws it run by run; ``resume`` continues in the last segment), and a next segment kept within
the workers' room."""

from __future__ import annotations

import dataclasses
import logging

from cluster.outcome import Outcome
from search.loop.segments import Segment
from search.loop.trials import RunningTrial
from search.store.records import Attr, write_attrs
from trainers.api import TrialConfig

__all__ = ["record_run", "record_segments", "within_room"]

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
    running: RunningTrial, config: TrialConfig, segment: Segment, fits: bool
) -> tuple[TrialConfig, Segment]:
    """The next segment as it can run: one wider than all the workers together (not ``fits``) goes on at the width
    the trial had, said in a warning."""
    if fits:
        return config, segment
    width, kept = segment.width, running.width
    log.warning("trial %d: the workers have no room for %d slots; it goes on at %d", running.number, width, kept)
    return dataclasses.replace(config, data_parallel=kept), dataclasses.replace(segment, width=kept)
