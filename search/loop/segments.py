"""A trial's life as segments, and the stops that end them: the records, built from plain values.

A trial runs as a sequence of :class:`Segment`s. Each has its resources (``width``: the slots, the
data-parallel processes), its parameter overrides (what changed at its start: a resize's rescaled learning
rate, a PBT exploit's explored parameters), the checkpoint it starts from (its own, or ``source``'s), the
epoch that checkpoint is at and the training examples seen by then. A segment begins by a
:class:`~search.vocab.terms.Transition` (``start``, ``continue``, ``resize``, ``exploit``) and the trial ends
by another (``prune``, ``target reached``): policies decide them (:mod:`search.loop.policies`), the campaign
carries them out, and a trial that changed segment records them all (``segments``, a list of
:meth:`Segment.to_record`).

Progress is counted in examples seen (the ``examples`` a trainer reports), not steps or epochs: a trial whose
global batch or width changes between segments stays comparable with the others on that axis (the pruner's
rungs too, with ``[pruner] resource = "examples"``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from search.sampling.pruning import RESOURCE_METRIC
from search.vocab.terms import Transition
from spaces.batch import LRScaling
from trainers.api import TrialConfig

__all__ = [
    "Segment",
    "Stop",
    "EXAMPLES",
    "current_segment",
    "following",
    "examples_seen",
    "resume_epoch",
    "segment_config",
    "segment_configs",
    "lr_for_batch",
    "Run",
]

Run = tuple[float, float, str]  # one run of a segment on a worker: (started, finished, worker), epoch seconds

EXAMPLES = RESOURCE_METRIC["examples"]  # the report metric counting examples seen (a rung's, with resource = examples)


@dataclasses.dataclass(frozen=True)
class Segment:
    """One segment of a trial's life: how it began, its width, where it starts and is planned to end."""

    index: int
    """0 for a trial's first segment."""
    transition: Transition
    """How it began (``start`` for the first)."""
    width: int
    """Slots (data-parallel processes) it runs on."""
    start_epoch: int
    """The epoch of the checkpoint it starts from (0: from scratch)."""
    end_epoch: int
    """Where it is planned to end (its config's ``epochs``)."""
    examples: int | None = None
    """Training examples seen at its start (None: the trainer does not report ``examples``)."""
    overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """The parameters that changed at its start, with their new values."""
    source: int | None = None
    """Whose checkpoint it starts from (None: the trial's own)."""
    runs: tuple[Run, ...] = ()
    """Each run of it on a worker, retries included: (started, finished, worker) (the report's timeline)."""

    def __post_init__(self) -> None:
        if self.index < 0:
            raise ValueError(f"segment index={self.index!r}: must be >= 0")
        if self.width < 1:
            raise ValueError(f"segment width={self.width!r}: must be >= 1 slot")
        if self.start_epoch < 0 or self.end_epoch < 1:
            raise ValueError(f"segment epochs {self.start_epoch}..{self.end_epoch}: need start >= 0 and end >= 1")
        if self.examples is not None and self.examples < 0:
            raise ValueError(f"segment examples={self.examples!r}: must be >= 0 (or None)")
        object.__setattr__(self, "transition", Transition(self.transition))

    def to_record(self) -> dict[str, Any]:
        """A JSON-ready dict (what the trial's ``segments`` attribute holds); :meth:`from_record` inverts it."""
        record = dataclasses.asdict(self)
        record["transition"] = str(self.transition)
        record["overrides"] = dict(self.overrides)
        record["runs"] = [list(run) for run in self.runs]
        return record

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Segment:
        runs = tuple((float(r[0]), float(r[1]), str(r[2])) for r in record.get("runs") or () if len(r) == 3)
        return cls(**{**record, "transition": Transition(record["transition"]), "runs": runs})

    def ran(self, run: Run) -> Segment:
        """This segment with one more run."""
        return dataclasses.replace(self, runs=(*self.runs, run))


@dataclasses.dataclass(frozen=True)
class Stop:
    """A policy's decision at a report: the trial's segment ends at its next report, then ``transition`` follows.

    ``prune`` ends it PRUNED with ``reason``; ``target reached`` ends it with its policy's verdict; a next-segment
    transition (``resize``, ...) is started by that policy's ``on_finished`` once the segment has ended.
    """

    reason: str
    transition: Transition = Transition.PRUNE

    def __post_init__(self) -> None:
        if not self.reason:
            raise ValueError("a stop needs a reason (what the trial records as its stop_reason)")
        object.__setattr__(self, "transition", Transition(self.transition))


def current_segment(segments: Sequence[Segment], config: TrialConfig, width: int) -> Segment:
    """The segment a trial runs now: the last it started, else its first (from its config and width)."""
    return segments[-1] if segments else Segment(0, Transition.START, width, 0, config.epochs, 0)


def following(
    previous: Segment,
    transition: Transition,
    before: TrialConfig,
    config: TrialConfig,
    examples: int | None,
    source: int | None = None,
) -> Segment:
    """The segment after ``previous`` that runs ``config`` (``before``: the config ``previous`` ran), begun by
    ``transition`` at the epoch ``before`` ended, with ``examples`` seen by then."""
    changed = {k: v for k, v in config.params.items() if before.params.get(k) != v}
    start = before.epochs
    return Segment(
        previous.index + 1, transition, config.data_parallel, start, config.epochs, examples, changed, source
    )


def examples_seen(history: Sequence[tuple[int, Mapping[str, float]]]) -> int | None:
    """The examples seen by a trial's last report that counts them (None: none does)."""
    for _step, metrics in reversed(history):
        if EXAMPLES in metrics:
            return int(metrics[EXAMPLES])
    return None


def resume_epoch(segment: Segment, config: TrialConfig, history: Sequence[tuple[int, Mapping[str, float]]]) -> int:
    """The epoch a run of a trial resumes at, as the controller knows it: the last epoch of ``segment`` (the one it
    runs now) that it reported (the ``epoch`` metric, as the built-in trainer reports it) and that a checkpoint holds
    (with a ``checkpoint_dir``: every ``checkpoint_every`` epochs), else the segment's start (0: from scratch)."""
    saved = [segment.start_epoch]
    if config.checkpoint_dir is not None:
        for _step, metrics in history:
            epoch = metrics.get("epoch")
            if epoch is not None and float(epoch).is_integer() and int(epoch) % config.checkpoint_every == 0:
                saved.append(int(epoch))
    return min(max(saved), config.epochs)


def segment_config(config: TrialConfig, width: int, overrides: Mapping[str, Any], end_epoch: int) -> TrialConfig:
    """The config of a trial's next segment: ``width`` processes, ``overrides`` on its parameters, ending at
    ``end_epoch``. Its checkpoint stays its own: the trainer identifies it by ``base_params`` (the trial's own
    parameters, before any segment's overrides), so a resumed segment with a new learning rate is not refused."""
    base = dict(config.base_params or config.params)
    total = max(end_epoch, config.schedule_epochs or config.epochs)
    return dataclasses.replace(
        config,
        params={**config.params, **overrides},
        base_params=base,
        data_parallel=width,
        epochs=end_epoch,
        schedule_epochs=total,
    )


def segment_configs(config: TrialConfig, segments: Sequence[Segment]) -> list[TrialConfig]:
    """The config each of ``segments`` runs, from ``config`` (the trial's first, or its last: its own parameters
    are its ``base_params``, else its ``params``); each segment's overrides apply on top of those before it."""
    base = dict(config.base_params or config.params)
    params: dict[str, Any] = dict(base)
    total = config.schedule_epochs or config.epochs
    configs = []
    for segment in segments:
        params = {**params, **segment.overrides}
        configs.append(
            dataclasses.replace(
                config,
                params=dict(params),
                base_params=base if segment.index else {},
                data_parallel=segment.width,
                epochs=segment.end_epoch,
                schedule_epochs=max(total, segment.end_epoch),
            )
        )
    return configs


def lr_for_batch(lr: float, batch: int, new_batch: int, rule: str) -> float:
    """The learning rate for ``new_batch`` of one tuned at ``batch``, after ``rule`` (``linear``, ``sqrt``,
    ``none``: :class:`spaces.batch.LRScaling`)."""
    return LRScaling(rule, batch)(lr, new_batch)
