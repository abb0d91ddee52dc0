"""What each segment of a resized ``[elastic]`` trial did, read from its record: no HTML, no plotting.

A segment's width, global batch and learning rate are its config's (the trial's own parameters with the
overrides of every segment up to it, as ``reproduce`` replays them); its throughput is the examples it trained
(from the examples seen at its start to those at the next one's start, or at the trial's last report) over the
seconds of its runs, start and rendezvous included: the ``examples_per_second`` of the trial's ``elastic``
record, here for its last segment too. Its statistical efficiency is ``(B_noise + B0) / (B_noise + B)`` at its
global batch ``B`` against the trial's first ``B0``, with the gradient noise scale the trainer last reported by
the segment's end (none reported: ``B0``, as the allocation takes it); goodput is throughput x efficiency, the
throughput of its epochs where the trainer timed them (else over its runs).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from cluster.goodput import efficiency
from search.loop.elastic import BATCH, LR, NOISE
from search.loop.segments import EXAMPLES, Segment, segment_configs
from search.store.records import TrialRecord
from trainers.api import TrialConfig

__all__ = ["SegmentPace", "segment_paces", "resized", "EPOCH_SECONDS"]

EPOCH_SECONDS = "epoch_seconds"  # the built-in trainer's seconds of one epoch (training and validation)


@dataclasses.dataclass(frozen=True)
class SegmentPace:
    """One segment of a trial: where it ran, at what batch and rate, how fast, and how much of it counted."""

    trial: int
    index: int
    transition: str
    width: int
    start_epoch: int
    end_epoch: int
    """The epoch it reached: its planned end, or the trial's last report within it (a pruned trial's)."""
    batch: int | None
    lr: float | None
    examples: int | None
    """Examples trained in it (None: the trainer does not report ``examples``)."""
    seconds: float
    """Its runs' seconds on the workers, retries included."""
    epoch_seconds: float | None
    """The seconds its epochs took, as the trainer timed them (None: not timed, or not every epoch)."""
    efficiency: float | None

    @property
    def examples_per_second(self) -> float | None:
        """Over its runs, start and rendezvous included (the ``elastic`` record's figure)."""
        return _rate(self.examples, self.seconds)

    @property
    def training_per_second(self) -> float | None:
        """Over its epochs, as the trainer timed them."""
        return _rate(self.examples, self.epoch_seconds)

    @property
    def throughput(self) -> float | None:
        """Examples/s of its epochs where timed, else over its runs."""
        training = self.training_per_second
        return training if training is not None else self.examples_per_second

    @property
    def goodput(self) -> float | None:
        """Examples/s that count: throughput x statistical efficiency."""
        rate = self.throughput
        return None if rate is None or self.efficiency is None else rate * self.efficiency

    @property
    def goodput_per_slot(self) -> float | None:
        good = self.goodput
        return None if good is None else good / self.width


def resized(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """The trials whose segments ran at more than one width, in number order."""
    return sorted(
        (r for r in records if len({int(s["width"]) for s in r.segments}) > 1),
        key=lambda r: r.number,
    )


def segment_paces(record: TrialRecord) -> list[SegmentPace]:
    """Each segment of ``record`` (a trial in segments with its config recorded; else none)."""
    if not record.segments or record.config is None:
        return []
    segments = [Segment.from_record(s) for s in record.segments]
    configs = segment_configs(TrialConfig.from_dict(dict(record.config)), segments)
    reports = [m for _step, m in record.history]
    base = _number(configs[0].params.get(BATCH))
    paces = []
    for i, (segment, config) in enumerate(zip(segments, configs, strict=True)):
        after = segments[i + 1] if i + 1 < len(segments) else None
        reached = after.start_epoch if after is not None else _last_epoch(reports, segment)
        batch = _number(config.params.get(BATCH))
        lr = config.params.get(LR)
        paces.append(
            SegmentPace(
                trial=record.number,
                index=segment.index,
                transition=str(segment.transition),
                width=segment.width,
                start_epoch=segment.start_epoch,
                end_epoch=reached,
                batch=None if batch is None else int(batch),
                lr=float(lr) if isinstance(lr, (int, float)) and not isinstance(lr, bool) else None,
                examples=_trained(segment, after, reports),
                seconds=sum(max(0.0, b - a) for a, b, _w in segment.runs),
                epoch_seconds=_epoch_seconds(reports, segment.start_epoch, reached),
                efficiency=_efficiency(batch, base, _noise_by(reports, reached)),
            )
        )
    return paces


def _rate(examples: int | None, seconds: float | None) -> float | None:
    return None if examples is None or seconds is None or seconds <= 0 else examples / seconds


def _epoch_seconds(reports: Sequence[dict[str, float]], start: int, end: int) -> float | None:
    """The trainer's ``epoch_seconds`` summed over the epochs ``start`` < epoch <= ``end`` (None: one is missing)."""
    timed = {int(m["epoch"]): m.get(EPOCH_SECONDS) for m in reports if start < m.get("epoch", -1.0) <= end}
    if len(timed) != end - start or any(v is None or not math.isfinite(v) for v in timed.values()):
        return None
    return sum(float(v) for v in timed.values() if v is not None)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _last_epoch(reports: Sequence[dict[str, float]], segment: Segment) -> int:
    """The trial's last reported epoch within ``segment`` (its last one), else its planned end."""
    epochs = [int(m["epoch"]) for m in reports if math.isfinite(m.get("epoch", math.nan))]
    inside = [e for e in epochs if segment.start_epoch < e <= segment.end_epoch]
    return max(inside) if inside else segment.end_epoch


def _trained(segment: Segment, after: Segment | None, reports: Sequence[dict[str, float]]) -> int | None:
    """Examples seen at the next segment's start (or the trial's last count) less those at this one's start."""
    if segment.examples is None:
        return None
    if after is not None:
        end = after.examples
    else:
        counts = [m[EXAMPLES] for m in reports if math.isfinite(m.get(EXAMPLES, math.nan))]
        end = int(counts[-1]) if counts else None
    return None if end is None else max(0, end - segment.examples)


def _noise_by(reports: Sequence[dict[str, float]], epoch: int) -> float | None:
    """The gradient noise scale the trainer last reported up to ``epoch`` (None: none)."""
    noise = None
    for m in reports:
        value = m.get(NOISE)
        if m.get("epoch", -math.inf) <= epoch and value is not None and math.isfinite(value) and value >= 0:
            noise = float(value)
    return noise


def _efficiency(batch: float | None, base: float | None, noise: float | None) -> float | None:
    if batch is None or base is None or batch <= 0 or base <= 0:
        return None
    return efficiency(batch, base, base if noise is None else noise)
