"""What a prediction says: a value with an interval, and what it rests on."""

from __future__ import annotations

import dataclasses
import enum
import math

__all__ = ["Basis", "Estimate", "Quantity", "Z90", "duration_text"]

#: The normal quantile of a two-sided 90% interval: every interval here is a 90% one.
Z90 = 1.6449


class Quantity(enum.StrEnum):
    """What the trial model predicts."""

    DURATION = "duration"  # seconds of a trial that ran to its end
    RUN = "run"  # seconds of any run (pruned, failed and lost ones too): what a trial costs its slots
    PER_EXAMPLE = "per example"  # seconds per training example seen, from running and finished trials
    MEMORY = "memory"  # peak memory in bytes (device memory where there is one)


class Basis(enum.StrEnum):
    """What an estimate rests on."""

    NONE = "none"  # nothing observed: mean, low and high are 0
    NEAREST = "nearest"  # too few points for a fit: the nearest configurations' values (their log mean and spread)
    SAMPLE = "sample"  # the mean of the values seen, whatever their configuration (one more trial's cost)
    FIT = "fit"  # a log-linear least-squares fit over the numeric parameters and the width, its residual spread


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A prediction: ``mean`` (the expected value), a 90% interval ``low``..``high``, ``n`` points it rests on."""

    mean: float
    low: float
    high: float
    basis: Basis = Basis.NONE
    n: int = 0

    def __post_init__(self) -> None:
        for name in ("mean", "low", "high"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name}={value!r}: an estimate is a finite number >= 0")
        if not self.low <= self.mean <= self.high:
            raise ValueError(f"low={self.low!r}, mean={self.mean!r}, high={self.high!r}: need low <= mean <= high")

    @property
    def known(self) -> bool:
        return self.basis is not Basis.NONE

    def times(self, factor: float) -> Estimate:
        """The same estimate for ``factor`` times the amount (examples, trials)."""
        return dataclasses.replace(self, mean=self.mean * factor, low=self.low * factor, high=self.high * factor)


UNKNOWN = Estimate(0.0, 0.0, 0.0)


def duration_text(seconds: float) -> str:
    """``45s``, ``4m10s``, ``2h05m``, ``3d04h``: how every line and report writes a duration."""
    s = int(round(max(0.0, seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"
