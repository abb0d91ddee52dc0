"""How far the controller runs ahead of the workers: queued tasks and trials per task.

Three numbers decide whether a freed slot restarts at once:

- **ahead**: tasks queued at the workers beyond the free slots. Dask starts a
  queued task the moment a slot frees, without a controller round trip. The
  queue covers the slots that free up during one controller round trip, and
  no more, so the sampler still sees fresh results.
- **spare**: trials asked ahead and held by the controller, for a slow sampler
  only (an ask of ``SLOW_ASK_SECONDS`` or more): enough to cover the finishes
  expected while it samples, so a freed slot never waits for a sample.
- **batch**: trials per Dask task. A task round trip costs the cluster about
  10-20 ms of slot time and the controller a few ms of CPU; a trial much
  shorter than that is run with others in one task, about ``TASK_SECONDS`` of
  trials each, so short trials are not dominated by dispatch.

Both are derived from measured trial durations and sampling times (``"auto"``)
or fixed by the spec; deterministic and population-based campaigns use 0 and 1.
"""

from __future__ import annotations

import dataclasses
import math

__all__ = ["Pipeline", "ROUND_TRIP_SECONDS", "TASK_SECONDS", "MAX_AUTO_BATCH", "SLOW_ASK_SECONDS"]

ROUND_TRIP_SECONDS = 2.0  # what one controller round trip may take on a loaded machine, with slack
TASK_SECONDS = 0.05  # trial time a batched task aims to hold
MAX_AUTO_BATCH = 32  # trials per task at most, when automatic
SLOW_ASK_SECONDS = 0.05  # a sampler this slow per ask gets spare trials asked ahead


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """The dispatch depth settings: ``-1`` = automatic; ``fixed`` = none ahead, one trial per task."""

    ahead_setting: int = -1
    batch_setting: int = -1
    fixed: bool = False

    def __post_init__(self) -> None:
        for name in ("ahead_setting", "batch_setting"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < -1:
                raise ValueError(f"{name}={value!r}: must be -1 (automatic) or an int >= 0")
        if self.batch_setting == 0:
            raise ValueError("batch_setting=0: a task holds at least one trial (or -1 for automatic)")

    def batch(self, median_duration: float | None, ask_seconds: float) -> int:
        """Trials per task.

        Automatic: one until durations are known; then about ``TASK_SECONDS`` of
        work per task, counting a trial as at least its sampling time (the
        controller cannot produce trials faster than it samples them).
        """
        if self.fixed:
            return 1
        if self.batch_setting > 0:
            return self.batch_setting
        if median_duration is None:
            return 1
        per_trial = max(median_duration, ask_seconds, 1e-4)
        return int(min(MAX_AUTO_BATCH, max(1, math.floor(TASK_SECONDS / per_trial))))

    def ahead(self, slots: int, median_duration: float | None, batch: int = 1) -> int:
        """Tasks queued at the workers beyond the free slots.

        Automatic: none until durations are known; then enough to cover the
        finishes expected during one round trip, at least one, at most one per slot.
        """
        if self.fixed:
            return 0
        if self.ahead_setting >= 0:
            return self.ahead_setting
        if median_duration is None or slots < 1:
            return 0
        task_seconds = max(median_duration * batch, 1e-3)
        return int(min(slots, max(1, math.ceil(ROUND_TRIP_SECONDS * slots / task_seconds))))

    def spare(self, slots: int, median_duration: float | None, ask_seconds: float) -> int:
        """Trials the controller keeps asked in hand beyond what it can launch now.

        None for a fast sampler; for a slow one, one before durations are known,
        then twice the finishes expected during one ask, at most one per slot.
        """
        if self.fixed or ask_seconds < SLOW_ASK_SECONDS or slots < 1:
            return 0
        if median_duration is None:
            return 1
        expected = 2.0 * ask_seconds * slots / max(median_duration, 1e-3)
        return int(min(slots, max(1, math.ceil(expected))))
