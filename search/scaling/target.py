"""Batch-size scaling: where a trial first reached the target (steps, examples, seconds)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Literal

from optuna.study import StudyDirection

from search.scaling.inputs import ScalingError
from search.vocab.terms import direction_of, maximizing

__all__ = ["Mode", "TargetHit", "TargetGoal", "steps_to_target"]

#: A goal's direction: ``"max"`` (reached when ``metric >= target``), ``"min"``, or Optuna's ``StudyDirection``.
Mode = Literal["max", "min"] | StudyDirection


@dataclasses.dataclass(frozen=True)
class TargetHit:
    """Where one trial first reached the target.

    ``steps`` and ``examples`` are training counters (floats: interpolation may
    land between reports); ``seconds`` is wall time to the target when the
    reports carry it, else ``None``; ``report`` is the reporter's step of the
    report that reached it and ``value`` the metric there.
    """

    steps: float
    examples: float | None
    seconds: float | None
    report: int
    value: float


def _reached(value: float, target: float, mode: Mode) -> bool:
    return value >= target if maximizing(mode) else value <= target


def _counter(metrics: Mapping[str, float], key: str, report: int) -> float:
    if key not in metrics:
        raise ScalingError(key, f"missing from the report at step {report} (keys: {', '.join(sorted(metrics))})")
    return float(metrics[key])


def steps_to_target(
    history: Sequence[tuple[int, Mapping[str, float]]],
    metric: str,
    target: float,
    mode: Mode,
    steps_key: str = "steps",
    examples_key: str | None = "examples",
    time_key: str | None = None,
    *,
    time_is_cumulative: bool = False,
    interpolate: bool = True,
) -> TargetHit | None:
    """The first report in ``history`` whose ``metric`` reaches ``target``; ``None`` if none does.

    ``history`` is the trial's reports in order, ``(reporter step, metrics)``.
    ``mode="max"`` means reached when ``metric >= target`` (accuracy),
    ``"min"`` when ``metric <= target`` (loss). Reports without ``metric`` (or
    with a NaN) are skipped; a non-empty history in which no report carries
    ``metric`` at all raises :class:`ScalingError` (a misspelt metric would
    otherwise read as "not reached").

    ``steps_key``/``examples_key`` name cumulative counters in the reports
    (the built-in loop reports ``"steps"`` and ``"examples"``);
    ``examples_key=None`` leaves ``examples`` as ``None``. ``time_key`` names a
    wall-time metric: per-report durations summed up to the hit (the loop's
    ``"epoch_seconds"``), or a running clock with ``time_is_cumulative=True``;
    ``seconds`` is ``None`` when no report up to the hit carried it.

    By default (``interpolate=True``) steps, examples and seconds are
    interpolated linearly in the metric between the previous report that
    carried it and the hit (no interpolation for a hit at the first such
    report). ``interpolate=False`` counts them at report granularity: the
    report itself, an upper bound by up to one report interval. With one
    report per epoch that interval is ``N/B`` steps, which adds about
    ``N/2`` to every ``E_min`` and so biases ``B_crit`` upward (+14% on
    digits-like synthetic sweeps, ``python -m bench.scaling_coverage``).
    """
    if not isinstance(mode, StudyDirection) and mode not in ("max", "min"):
        raise ScalingError("mode", f"must be 'max' or 'min', got {mode!r}")
    target = float(target)
    if not math.isfinite(target):
        raise ScalingError("target", f"must be a finite number, got {target!r}")
    elapsed: float | None = None  # None until a report carries time_key
    previous: tuple[float, float, float | None, float | None] | None = None  # value, steps, examples, seconds
    seen_metric = False
    for report, metrics in history:
        if time_key is not None and time_key in metrics:
            value_t = float(metrics[time_key])
            elapsed = value_t if time_is_cumulative or elapsed is None else elapsed + value_t
        if metric not in metrics or not math.isfinite(float(metrics[metric])):
            continue
        seen_metric = True
        value = float(metrics[metric])
        steps = _counter(metrics, steps_key, report)
        examples = _counter(metrics, examples_key, report) if examples_key is not None else None
        seconds = elapsed  # None without time_key, or while no report has carried it
        if _reached(value, target, mode):
            if interpolate and previous is not None and value != previous[0]:
                f = (target - previous[0]) / (value - previous[0])

                def lerp(a: float | None, b: float | None) -> float | None:
                    return None if a is None or b is None else a + f * (b - a)  # noqa: B023 (called at once)

                steps = lerp(previous[1], steps)  # type: ignore[assignment]
                examples = lerp(previous[2], examples)
                seconds = lerp(previous[3], seconds)
            return TargetHit(steps=float(steps), examples=examples, seconds=seconds, report=int(report), value=value)
        previous = (value, steps, examples, seconds)
    if history and not seen_metric:
        keys = sorted({k for _, m in history for k in m})
        raise ScalingError("metric", f"{metric!r} never appears in the reports (reported: {', '.join(keys)})")
    return None


@dataclasses.dataclass(frozen=True)
class TargetGoal:
    """Stop a trial once ``metric`` reaches ``target``; its value is the steps it took.

    A trial that never reaches the target gets twice the steps it ran, so the
    inner searches learn that it was worse than any trial that did.
    """

    metric: str
    target: float
    mode: StudyDirection
    """Which way the metric improves; ``"max"``/``"min"`` (or ``"maximize"``/``"minimize"``) are read as such."""
    interpolate: bool = True  # steps to target interpolated between reports (False: report granularity)

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", direction_of(self.mode))

    @property
    def comparison(self) -> str:
        """``>=`` (the metric must reach the target from below) or ``<=``."""
        return ">=" if self.mode == StudyDirection.MAXIMIZE else "<="

    def reached(self, metrics: Mapping[str, float]) -> bool:
        value = metrics.get(self.metric)
        if value is None or not math.isfinite(value):
            return False
        return value >= self.target if self.mode == StudyDirection.MAXIMIZE else value <= self.target

    def value(self, history: Sequence[tuple[int, Mapping[str, float]]]) -> float:
        hit = steps_to_target(history, self.metric, self.target, self.mode, interpolate=self.interpolate)
        if hit is not None:
            return float(hit.steps)
        last = history[-1][1] if history else {}
        return 2.0 * float(last.get("steps", 1.0))
