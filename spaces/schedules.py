"""Learning-rate schedules: frozen dataclasses, each a pure ``lr(step)``.

``step`` is the optimizer step, starting at 0. Every family except
:class:`OneCycle` and :class:`Piecewise` shares one linear warmup::

    lr(step) = base_lr * (step + 1) / warmup_steps      for step < warmup_steps

so the LR reaches ``base_lr`` on the last warmup step; the family's decay is
then applied to ``t = step - warmup_steps`` (``t = 0`` gives ``base_lr``).
This matches ``torch.optim.lr_scheduler.LinearLR(start_factor=1/warmup_steps,
total_iters=warmup_steps - 1)`` followed by the torch decay scheduler.
"""

from __future__ import annotations

import abc
import dataclasses
import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from spaces.errors import SpaceError, check_choice, check_int, check_number, check_positive, shown

SCHEDULE_FAMILIES: tuple[str, ...] = (
    "constant",
    "step",
    "exponential",
    "cosine",
    "warmup_cosine",
    "onecycle",
)


def _check_step(step: int) -> int:
    try:
        step = operator.index(step)
    except TypeError:
        raise SpaceError("step", f"must be an integer, got {shown(step)}") from None
    if step < 0:
        raise SpaceError("step", f"must be >= 0, got {step}")
    return step


class Schedule(abc.ABC):
    """A learning rate as a pure function of the optimizer step."""

    family: ClassVar[str]
    base_lr: float
    warmup_steps: int

    @abc.abstractmethod
    def __call__(self, step: int) -> float:
        """The learning rate at optimizer step ``step`` (0-based)."""

    def describe(self) -> dict[str, Any]:
        """The family and every field, as builtins, for reports."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        return {"family": self.family, **fields}


class _Warmed(Schedule):
    """Shared linear warmup and validation of ``base_lr``/``warmup_steps``."""

    def _validate_common(self) -> None:
        object.__setattr__(self, "base_lr", check_positive(f"{self.family}.base_lr", self.base_lr))
        object.__setattr__(
            self,
            "warmup_steps",
            check_int(f"{self.family}.warmup_steps", self.warmup_steps, minimum=0),
        )

    def _check_gamma(self, gamma: object) -> float:
        value = check_number(f"{self.family}.gamma", gamma)
        if not 0.0 < value <= 1.0:
            raise SpaceError(f"{self.family}.gamma", f"must be in (0, 1], got {gamma!r}")
        return value

    @abc.abstractmethod
    def _decay(self, t: int) -> float:
        """The LR ``t`` steps after warmup."""

    def __call__(self, step: int) -> float:
        step = _check_step(step)
        if step < self.warmup_steps:
            return self.base_lr * (step + 1) / self.warmup_steps
        return self._decay(step - self.warmup_steps)


@dataclass(frozen=True)
class Constant(_Warmed):
    """``base_lr`` after warmup."""

    base_lr: float
    warmup_steps: int = 0
    family: ClassVar[str] = "constant"

    def __post_init__(self) -> None:
        self._validate_common()

    def _decay(self, t: int) -> float:
        return self.base_lr


@dataclass(frozen=True)
class StepDecay(_Warmed):
    """``base_lr * gamma ** (t // step_size)`` (torch ``StepLR``)."""

    base_lr: float
    step_size: int
    gamma: float = 0.1
    warmup_steps: int = 0
    family: ClassVar[str] = "step"

    def __post_init__(self) -> None:
        self._validate_common()
        object.__setattr__(self, "step_size", check_int("step.step_size", self.step_size, minimum=1))
        object.__setattr__(self, "gamma", self._check_gamma(self.gamma))

    def _decay(self, t: int) -> float:
        return self.base_lr * self.gamma ** (t // self.step_size)


@dataclass(frozen=True)
class Exponential(_Warmed):
    """``base_lr * gamma ** t`` (torch ``ExponentialLR``)."""

    base_lr: float
    gamma: float
    warmup_steps: int = 0
    family: ClassVar[str] = "exponential"

    def __post_init__(self) -> None:
        self._validate_common()
        object.__setattr__(self, "gamma", self._check_gamma(self.gamma))

    def _decay(self, t: int) -> float:
        return self.base_lr * self.gamma**t


@dataclass(frozen=True)
class Cosine(_Warmed):
    """Cosine from ``base_lr`` to ``min_lr`` at ``total_steps``, ``min_lr`` after.

    With ``D = total_steps - warmup_steps``:
    ``lr = min_lr + (base_lr - min_lr) * (1 + cos(pi * t / D)) / 2`` for
    ``t < D`` (torch ``CosineAnnealingLR(T_max=D, eta_min=min_lr)``).
    """

    base_lr: float
    total_steps: int
    min_lr: float = 0.0
    warmup_steps: int = 0
    family: ClassVar[str] = "cosine"

    def __post_init__(self) -> None:
        self._validate_common()
        f = self.family
        total = check_int(f"{f}.total_steps", self.total_steps, minimum=1)
        if total <= self.warmup_steps:
            raise SpaceError(
                f"{f}.total_steps",
                f"must be > warmup_steps ({self.warmup_steps}), got {total}",
            )
        min_lr = check_number(f"{f}.min_lr", self.min_lr)
        if not 0.0 <= min_lr <= self.base_lr:
            raise SpaceError(f"{f}.min_lr", f"must be in [0, base_lr={self.base_lr}], got {min_lr}")
        object.__setattr__(self, "total_steps", total)
        object.__setattr__(self, "min_lr", min_lr)

    def _decay(self, t: int) -> float:
        span = self.total_steps - self.warmup_steps
        if t >= span:
            return self.min_lr
        return self.min_lr + (self.base_lr - self.min_lr) * (1 + math.cos(math.pi * t / span)) / 2


@dataclass(frozen=True)
class WarmupCosine(Cosine):
    """:class:`Cosine` that requires a linear warmup (``warmup_steps >= 1``)."""

    family: ClassVar[str] = "warmup_cosine"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("warmup_cosine.warmup_steps", self.warmup_steps, minimum=1)


def _cos_anneal(start: float, end: float, pct: float) -> float:
    return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)


@dataclass(frozen=True)
class OneCycle(Schedule):
    """The one-cycle policy, as torch ``OneCycleLR`` (cos, three_phase=False).

    The LR rises from ``max_lr / div_factor`` to ``max_lr`` over the first
    ``pct_start * total_steps`` steps (peak at step ``pct_start*total_steps - 1``),
    then anneals to ``max_lr / div_factor / final_div_factor`` at step
    ``total_steps - 1`` and stays there. ``base_lr`` is ``max_lr``;
    ``warmup_steps`` is the length of the rise.
    """

    max_lr: float
    total_steps: int
    pct_start: float = 0.3
    div_factor: float = 25.0
    final_div_factor: float = 1e4
    family: ClassVar[str] = "onecycle"

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_lr", check_positive("onecycle.max_lr", self.max_lr))
        total = check_int("onecycle.total_steps", self.total_steps, minimum=2)
        pct = check_number("onecycle.pct_start", self.pct_start)
        if not 0.0 < pct < 1.0:
            raise SpaceError("onecycle.pct_start", f"must be in (0, 1), got {self.pct_start!r}")
        if pct * total <= 1.0:
            raise SpaceError(
                "onecycle.pct_start",
                f"the rise must span more than one step: pct_start * total_steps = {pct * total:g} must be > 1",
            )
        object.__setattr__(self, "total_steps", total)
        object.__setattr__(self, "pct_start", pct)
        for name in ("div_factor", "final_div_factor"):
            object.__setattr__(self, name, check_positive(f"onecycle.{name}", getattr(self, name)))

    @property
    def base_lr(self) -> float:  # type: ignore[override]
        return self.max_lr

    @property
    def warmup_steps(self) -> int:  # type: ignore[override]
        return round(self.pct_start * self.total_steps)

    def __call__(self, step: int) -> float:
        step = min(_check_step(step), self.total_steps - 1)
        initial = self.max_lr / self.div_factor
        peak_step = self.pct_start * self.total_steps - 1
        if step <= peak_step:
            return _cos_anneal(initial, self.max_lr, step / peak_step)
        last = self.total_steps - 1
        pct = (step - peak_step) / (last - peak_step)
        return _cos_anneal(self.max_lr, initial / self.final_div_factor, pct)


@dataclass(frozen=True)
class Piecewise(Schedule):
    """A step function: the LR of the last point whose step is <= ``step``.

    ``points`` are ``(step, lr)`` pairs with strictly increasing steps, the
    first at step 0 (for example a population-based-training history).
    """

    points: tuple[tuple[int, float], ...]
    family: ClassVar[str] = "piecewise"

    def __post_init__(self) -> None:
        if isinstance(self.points, (str, bytes)) or not isinstance(self.points, Sequence):
            raise SpaceError("piecewise.points", f"must be a list of [step, lr], got {shown(self.points)}")
        if not self.points:
            raise SpaceError("piecewise.points", "must not be empty")
        points: list[tuple[int, float]] = []
        for i, point in enumerate(self.points):
            key = f"piecewise.points[{i}]"
            if isinstance(point, (str, bytes)) or not isinstance(point, Sequence) or len(point) != 2:
                raise SpaceError(key, f"must be a [step, lr] pair, got {shown(point)}")
            step = check_int(f"{key}.step", point[0], minimum=0)
            if points and step <= points[-1][0]:
                raise SpaceError(f"{key}.step", f"must be > the previous step ({points[-1][0]}), got {step}")
            points.append((step, check_positive(f"{key}.lr", point[1])))
        if points[0][0] != 0:
            raise SpaceError("piecewise.points[0].step", f"must be 0, got {points[0][0]}")
        object.__setattr__(self, "points", tuple(points))

    @property
    def base_lr(self) -> float:  # type: ignore[override]
        return self.points[0][1]

    @property
    def warmup_steps(self) -> int:  # type: ignore[override]
        return 0

    def __call__(self, step: int) -> float:
        step = _check_step(step)
        lr = self.points[0][1]
        for start, value in self.points:
            if start > step:
                break
            lr = value
        return lr

    def to_list(self) -> list[list[int | float]]:
        """``[[step, lr], ...]``, JSON-ready."""
        return [[step, lr] for step, lr in self.points]

    @classmethod
    def from_list(cls, points: Sequence[Sequence[int | float]]) -> Piecewise:
        """The inverse of :meth:`to_list`."""
        return cls(tuple((p[0], p[1]) for p in points))  # type: ignore[misc]

    def describe(self) -> dict[str, Any]:
        return {"family": self.family, "points": self.to_list()}


_CLASSES: dict[str, type[Schedule]] = {
    cls.family: cls for cls in (Constant, StepDecay, Exponential, Cosine, WarmupCosine, OneCycle, Piecewise)
}


def schedule_from_dict(description: Mapping[str, Any]) -> Schedule:
    """Rebuild a schedule from :meth:`Schedule.describe`'s output."""
    fields = dict(description)
    family = check_choice("schedule.family", fields.pop("family", None), _CLASSES)
    if family == "piecewise":
        return Piecewise.from_list(fields.get("points", ()))
    try:
        return _CLASSES[family](**fields)
    except TypeError as exc:
        raise SpaceError(f"schedule.{family}", str(exc)) from None


def make_schedule(family: str, base_lr: float, total_steps: int, warmup_steps: int = 0) -> Schedule:
    """A schedule of ``family`` with default shape parameters.

    Defaults: step: ``step_size = max(1, total_steps // 3)``, gamma 0.1;
    exponential: gamma so the LR is 1% of ``base_lr`` at ``total_steps``;
    cosine: ``min_lr = 0``; warmup_cosine: ``warmup_steps`` defaults to
    ``max(1, total_steps // 20)``; onecycle: ``max_lr = base_lr`` and the rise
    lasts ``warmup_steps`` steps if given, else 30% of ``total_steps``.
    """
    check_choice("schedule.family", family, SCHEDULE_FAMILIES)
    total = check_int("schedule.total_steps", total_steps, minimum=1)
    warmup = check_int("schedule.warmup_steps", warmup_steps, minimum=0)
    if family == "warmup_cosine" and warmup == 0:
        warmup = max(1, total // 20)
    if warmup >= total:
        raise SpaceError("schedule.warmup_steps", f"must be < total_steps ({total}), got {warmup}")
    if family == "constant":
        return Constant(base_lr, warmup)
    if family == "step":
        return StepDecay(base_lr, max(1, total // 3), 0.1, warmup)
    if family == "exponential":
        return Exponential(base_lr, 0.01 ** (1.0 / (total - warmup)), warmup)
    if family == "cosine":
        return Cosine(base_lr, total, 0.0, warmup)
    if family == "warmup_cosine":
        return WarmupCosine(base_lr, total, 0.0, warmup)
    return OneCycle(base_lr, total, pct_start=(warmup / total) if warmup else 0.3)
