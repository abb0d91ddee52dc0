"""Replaying a trial that ran in segments (a resize, ...) for ``hypersweep reproduce``: each segment in turn.

A trial's record holds its last segment's config and its ``segments`` (:class:`search.loop.segments.Segment`
records): each one's width, the parameters that changed at its start and the epoch it ends at. The replay runs
them in order in one scratch checkpoint folder, as the campaign did: the first from scratch, each next one from
the checkpoint the one before left, at its own width with its own parameters (its ``base_params``, the trial's
own, identify the checkpoint, as in the campaign). All segments' reports go to one reporter, so a pruned
trial's ``stop_after`` counts its reports over the whole trial. A PBT member's segments start from other
members' checkpoints: :mod:`search.pbt.replay` replays those; a segment here with a ``source`` is refused.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from search.loop.segments import Segment, segment_configs
from spaces.errors import InputError
from trainers.api import RecordingReporter, TrialConfig

__all__ = ["replay_segments"]

Reports = list[tuple[int, dict[str, float]]]


def _own_checkpoints(number: int, segments: Sequence[Segment]) -> None:
    for segment in segments:
        if segment.source is not None:
            raise InputError(
                f"trial {number}: segment {segment.index} starts from trial {segment.source}'s checkpoint; "
                "only a trial whose segments go on from its own checkpoint is replayed here"
            )


def replay_segments(
    entry: str, config: Mapping[str, Any], segments: Sequence[Segment], stop_after: int | None, names: Sequence[str]
) -> tuple[Reports, dict[str, float], str]:
    """Run ``segments`` of the trial whose last config is ``config``: (all their reports, the last one's final
    metrics, what the trainer raised or "")."""
    from cluster.entrypoint import returned
    from trainers.api import load_trainer  # by name, at run time

    last = TrialConfig.from_dict(dict(config))
    _own_checkpoints(last.number, segments)
    fit = load_trainer(entry)
    reporter = RecordingReporter(stop_after=stop_after)
    metrics: dict[str, float] = {}
    values: tuple[float, ...] = ()
    with tempfile.TemporaryDirectory(prefix="hypersweep-segments-replay-") as folder:
        for segment_config in segment_configs(last, segments):
            if reporter.should_stop():
                break
            try:
                metrics, values = returned(fit(dataclasses.replace(segment_config, checkpoint_dir=folder), reporter))
            except Exception as exc:  # noqa: BLE001 - a trial that now fails is a mismatch, shown as one line
                return reporter.reports, {}, f"the trainer raised {type(exc).__name__}: {exc}"
    return reporter.reports, {**metrics, **dict(zip(names, values))}, ""
