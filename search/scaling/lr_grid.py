"""A tuned learning rate at every batch size: a log grid per batch size, widened until its best rate is inside.

Shallue et al. (2018) and McCandlish et al. (2018) measure steps to target at each batch size's *own* best
learning rate. A window that follows a scaling rule (``lr * sqrt(B / base)``) and holds two random draws gives
each batch size a best rate that follows the rule by construction (:mod:`search.scaling.forced_rule`). With
``[scaling] lr_grid = K`` each batch size trains at ``K`` rates ``lr_step`` apart, centred on the geometric middle
of ``[space] lr`` (which ``lr_scaling`` still scales to the batch size: the rule only centres the grid). After a
round, :func:`bracket` reads each batch size's results: when its best rate (fewest steps to target) is the lowest
or the highest it tried, the next round tries one step further out (:func:`widening`), until the best is inside
its tried rates, or the next rate would leave ``[space] lr`` (the best is then a bound, not an optimum, and the
conclusion says so). A batch size none of whose rates reached the target is widened on both sides.

Rates are in the units of ``[space] lr`` (before ``lr_scaling``); the scaling is monotone at a fixed batch size,
so the bracket is the same in the rates trained with.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from search.scaling.numbers import approx
from search.scaling.outcomes import TargetOutcome, outcome_of
from search.scaling.target import TargetGoal
from search.spec.scaling import BATCH, LR, ScalingSpec

__all__ = [
    "grid_rates",
    "grid_plan",
    "Edge",
    "Bracket",
    "bracket",
    "brackets_of",
    "widening",
    "bracket_sentence",
    "SCALING_ROUND",
    "running_round",
    "round_label",
]

SCALING_ROUND = "scaling_round"  # a trial's user attribute: the lr_grid round that enqueued it (0: the grid)

_TOLERANCE = 1e-9  # relative: a rate computed as low * step^k is inside [low, high] up to rounding


def running_round(trials: Iterable[FrozenTrial]) -> int:
    """The round a sweep's trials are in: the last one enqueued (0: the grid)."""
    return max((int(t.user_attrs.get(SCALING_ROUND, 0)) for t in trials), default=0)


def round_label(scaling: ScalingSpec | None, trials: Iterable[FrozenTrial]) -> str:
    """What the expected end of a sweep with an ``lr_grid`` is the end of: ``round 2`` (counted from 1, the grid;
    a trial's ``scaling_round`` is one less), each round a campaign of its own; "" for a campaign without rounds."""
    if scaling is None or not scaling.lr_grid:
        return ""
    return f"round {running_round(trials) + 1}"


def grid_rates(low: float, high: float, points: int, step: float) -> tuple[float, ...]:
    """``points`` rates ``step`` apart, centred on the geometric middle of ``[low, high]``, lowest first."""
    if points < 1 or not step > 1 or not 0 < low <= high:
        raise ValueError(
            f"grid_rates: need points >= 1, step > 1, 0 < low <= high; got {points}, {step}, {low}, {high}"
        )
    middle = math.sqrt(low * high)
    return tuple(middle * step ** (i - (points - 1) / 2) for i in range(points))


def grid_plan(batch_sizes: Sequence[int], rates: Sequence[float]) -> list[dict[str, Any]]:
    """The first round's trials as ``{batch_size, lr}``: every batch size at each rate, the batch sizes in turn
    (so the first trials cover every batch size at the middle rates first)."""
    order = sorted(range(len(rates)), key=lambda i: (abs(i - (len(rates) - 1) / 2), i))
    return [{BATCH: int(b), LR: float(rates[i])} for i in order for b in batch_sizes]


class Edge(enum.StrEnum):
    """Where a batch size's best rate lies among the rates it tried."""

    INSIDE = "bracketed"  # a tried rate on each side was worse
    LOW = "lowest"  # the lowest tried rate was the best
    HIGH = "highest"  # the highest tried rate was the best
    NONE = "none reached"  # no tried rate reached the target


@dataclasses.dataclass(frozen=True)
class Bracket:
    """One batch size's rates after a round, and what the next round tries (``next_rates``; empty: done)."""

    batch_size: int
    tried: tuple[float, ...]  # every rate tried, lowest first
    best_lr: float | None  # the rate with the fewest steps to target (None: none reached)
    edge: Edge
    next_rates: tuple[float, ...]
    initial: tuple[float, float]  # the first round's lowest and highest rate

    @property
    def widened(self) -> bool:
        """Rates beyond the first round's were tried."""
        return self.tried[0] < self.initial[0] * (1 - _TOLERANCE) or self.tried[-1] > self.initial[1] * (1 + _TOLERANCE)

    @property
    def at_limit(self) -> bool:
        """The best is at an edge and the rate beyond it would leave ``[space] lr``: a bound, not an optimum."""
        return self.edge is not Edge.INSIDE and not self.next_rates


def bracket(
    batch_size: int,
    results: Iterable[tuple[float, float | None]],
    initial: tuple[float, float],
    low: float,
    high: float,
    step: float,
) -> Bracket:
    """Where ``batch_size``'s best rate lies among ``results`` (``(rate, steps to target or None)``) and which rates
    to try next: one ``step`` beyond the edge the best sits at, if still within ``[low, high]``."""
    by_rate: dict[float, float] = {}
    for rate, steps in results:
        worse = math.inf if steps is None or not math.isfinite(steps) else float(steps)
        by_rate[float(rate)] = min(by_rate.get(float(rate), math.inf), worse)
    if not by_rate:
        raise ValueError(f"bracket: batch size {batch_size} has no results")
    tried = tuple(sorted(by_rate))
    best = min(tried, key=lambda r: (by_rate[r], r))
    below = tried[0] / step if tried[0] / step >= low * (1 - _TOLERANCE) else None
    above = tried[-1] * step if tried[-1] * step <= high * (1 + _TOLERANCE) else None
    beyond: tuple[float | None, ...]
    if not math.isfinite(by_rate[best]):
        edge, beyond, best_lr = Edge.NONE, (below, above), None
    elif best == tried[0]:
        edge, beyond, best_lr = Edge.LOW, (below,), best
    elif best == tried[-1]:
        edge, beyond, best_lr = Edge.HIGH, (above,), best
    else:
        edge, beyond, best_lr = Edge.INSIDE, (), best
    following = tuple(r for r in beyond if r is not None)
    return Bracket(int(batch_size), tried, best_lr, edge, following, initial)


def _steps(trial: FrozenTrial, goal: TargetGoal) -> float | None:
    """A finished trial's steps to target (None: it did not reach it, or was stopped or failed first)."""
    if (
        trial.state != TrialState.COMPLETE
        or trial.value is None
        or outcome_of(trial, goal) is not TargetOutcome.REACHED
    ):
        return None
    return float(trial.value)


def brackets_of(
    trials: Iterable[FrozenTrial], scaling: ScalingSpec, goal: TargetGoal, low: float, high: float
) -> dict[int, Bracket] | None:
    """Every batch size's :class:`Bracket` from the sweep's finished trials (``[space] lr`` from ``low`` to
    ``high``); None while a trial is unfinished (waiting or running: the round is not over)."""
    results: dict[int, list[tuple[float, float | None]]] = {b: [] for b in scaling.batch_sizes}
    for trial in trials:
        if not trial.state.is_finished():
            return None
        if BATCH in trial.params and LR in trial.params and int(trial.params[BATCH]) in results:
            results[int(trial.params[BATCH])].append((float(trial.params[LR]), _steps(trial, goal)))
    rates = grid_rates(low, high, scaling.lr_grid, scaling.lr_step)
    initial = (rates[0], rates[-1])
    return {b: bracket(b, found, initial, low, high, scaling.lr_step) for b, found in results.items() if found}


def widening(brackets: Mapping[int, Bracket]) -> list[dict[str, Any]]:
    """The next round's trials: each batch size's next rates, the batch sizes in turn."""
    return [{BATCH: b, LR: r} for b, br in sorted(brackets.items()) for r in br.next_rates]


def _sizes(brackets: Iterable[Bracket]) -> str:
    return ", ".join(f"{b.batch_size:,}" for b in brackets)


def bracket_sentence(
    brackets: Mapping[int, Bracket],
    scaling: ScalingSpec,
    rule: str,
    trained: Callable[[float, int], float] = lambda lr, _b: lr,
) -> str:
    """The conclusion's words on how the rate was searched, what the design forces, and where it widened (the rates
    as trained: ``trained(lr, B)`` applies the spec's ``lr_scaling``)."""
    every = list(brackets.values())
    inside = [b for b in every if b.edge is Edge.INSIDE]
    widened = [b for b in every if b.widened]
    bounded = [b for b in every if b.at_limit]
    centre = "" if rule == "none" else f" (its middle scaled to each batch size by lr_scaling = {rule!r})"
    text = (
        f"The learning rate was tuned at every batch size: a log grid of {scaling.lr_grid} rates "
        f"{approx(scaling.lr_step)}x apart{centre}, widened by one step wherever the best rate was the lowest or "
        f"highest tried. The design forces only the grid's resolution (each best rate is known to within a factor "
        f"of {approx(math.sqrt(scaling.lr_step))}), not the exponent: "
        f"{len(inside)} of {len(every)} batch sizes have their best rate inside the rates they tried."
    )
    if widened:
        reach = "; ".join(
            f"B={b.batch_size:,}: {trained(b.tried[0], b.batch_size):.3g} to {trained(b.tried[-1], b.batch_size):.3g}"
            for b in widened
        )
        text += f" The window widened at {len(widened)} batch size(s) (rates trained with, {reach})."
    if bounded:
        text += (
            f" At B={_sizes(bounded)} the best rate is at the edge of [space] lr and a rate further out is not "
            "allowed: that best rate is a bound, not an optimum, and the fitted exponent leans on it."
        )
    return text
