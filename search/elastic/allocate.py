"""Which trials get free slots, and which give slots back: by goodput per slot (Pollux's idea, for a search).

Each candidate is a :class:`Candidate`: a trial the search wants to continue (promoted at a rung, a PBT survivor,
or any running trial under ``grow = "goodput"``), its width now, and its :class:`~cluster.goodput.Goodput`. A
trial's *speedup* at a width is its goodput there over its goodput at its width now. :func:`grow` hands out the
free slots less the ``reserve`` (kept for new trials, so the search keeps exploring) one resize at a time: of all
the resizes to a larger allowed width that fit (at most ``max_slots`` per trial), the one whose speedup gained per
slot added is highest, while that gain is at least ``min_gain`` (a slot that buys less than that is worth more to
a new trial). :func:`shrink` frees ``needed`` slots for waiting trials the other way: the resizes to a smaller
allowed width that lose the least speedup per slot freed.

:func:`hurry` is for a trial past its pruner's last rung (no rung stops it before its last epoch, so its remaining
examples are known: a :class:`Finishing`): it may take free slots even while new trials wait, where the seconds
its result comes sooner, weighed by the chance ``share`` that its result is the search's best, exceed the delay
to a result queued behind all the ``1 / share`` trials expected past the last rung, each hurried alike (their
extra slot-seconds spread over the cluster's ``slots``). Goodput per slot alone never favours a wider trial over a
new one (speedup is concave in the width); what it misses is that a search is judged by when its best result
arrives, not by examples trained.

Where this differs from Pollux: Pollux re-optimises every job's allocation at once with a genetic algorithm over a
fairness-weighted sum of speedups, and picks each job's batch size too; here the search decides which trials
deserve more (promotion), the batch follows the spec's rule, and a greedy choice over a few allowed widths (each
trial's goodput is concave in its width for these models, so greedy by marginal gain is what an exact search
would choose in the common case) is enough, easy to explain, and deterministic (ties go to the lower trial number).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from cluster.goodput import Goodput

__all__ = ["Candidate", "Finishing", "MIN_GAIN", "grow", "hurry", "shrink"]

MIN_GAIN = 0.25  # least speedup per added slot a resize must buy (a new trial on that slot would gain 1 trial)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A running trial that may be resized: its number, width now and goodput per width."""

    number: int
    width: int
    goodput: Goodput

    def speedup(self, width: int) -> float:
        return self.goodput(width) / self.goodput(self.width)


@dataclasses.dataclass(frozen=True)
class Finishing:
    """A running trial past its pruner's last rung: ``remaining`` examples to go after its next report (where a
    resize can begin), ``restart`` seconds a new run costs it before its first step (start, rendezvous, checkpoint),
    ``until_report`` seconds to that report (slots taken for it wait idle until then)."""

    candidate: Candidate
    remaining: float
    restart: float = 0.0
    until_report: float = 0.0

    def seconds(self, width: int) -> float:
        """Seconds to train the remaining examples at ``width`` (goodput: examples that count per second)."""
        return self.remaining / self.candidate.goodput(width)

    def net(self, width: int, slots: int, share: float) -> float:
        """Seconds by which the search's best result comes sooner if the rest runs at ``width``: the seconds this
        trial's result is brought forward (``saved``) with chance ``share`` that it is the best, less the delay to a
        result queued behind every trial past the last rung (``1 / share`` of them, each hurried alike), each one's
        extra slot-seconds spread over ``slots``."""
        now = self.candidate.width
        if width == now:
            return 0.0
        saved = self.seconds(now) - self.seconds(width) - self.restart
        spent = width * (self.seconds(width) + self.restart) + (width - now) * self.until_report
        extra = spent - now * self.seconds(now)
        return share * saved - extra / (slots * max(share, 1e-9))


def hurry(
    finishing: Sequence[Finishing],
    room: int,
    slots: int,
    widths: Sequence[int],
    share: float,
    max_slots: int | None = None,
) -> Mapping[int, int]:
    """The next width of each finishing trial that is to take some of ``room`` slots (``{trial: width}``): each
    trial one step (to the next allowed width: every resize pays its restart, and is judged on its own), the steps
    with the highest expected time-to-best gain per slot added (:meth:`Finishing.net`) first, while that gain is
    > 0 and they fit. ``share``: the chance that a trial past the last rung ends as the search's best (0..1);
    ``slots``: the cluster's."""
    _check(widths, 1 if max_slots is None else max_slots, room)
    if not 0.0 < share <= 1.0:
        raise ValueError(f"share={share!r}: must be a probability, > 0 and <= 1")
    if slots < 1:
        raise ValueError(f"slots={slots!r}: must be >= 1")
    top = max(widths) if max_slots is None else max_slots
    allowed = sorted({w for w in widths if w <= top})
    steps = []
    for f in finishing:
        width = f.candidate.width
        target = next((w for w in allowed if w > width), None)
        if target is not None and (gain := f.net(target, slots, share) / (target - width)) > 0:
            steps.append((-gain, f.candidate.number, target, target - width))
    chosen: dict[int, int] = {}
    for _gain, number, target, added in sorted(steps):
        if added <= room:
            chosen[number] = target
            room -= added
    return chosen


def _check(widths: Sequence[int], max_slots: int, free: int) -> None:
    if not widths or any(w < 1 for w in widths):
        raise ValueError(f"widths={list(widths)!r}: need at least one width, each >= 1")
    if max_slots < 1:
        raise ValueError(f"max_slots={max_slots!r}: must be >= 1")
    if free < 0:
        raise ValueError(f"free slots={free!r}: must be >= 0")


def _best_step(
    widths: dict[int, int], candidates: Sequence[Candidate], allowed: Sequence[int], room: int | None, larger: bool
) -> tuple[float, int, int] | None:
    """(score, trial, width) of the best single resize of at most ``room`` slots (None: any), score = speedup
    gained per slot added (shrinking: minus the speedup lost per slot freed; both: the higher the better)."""
    best: tuple[float, int, int] | None = None
    for cand in sorted(candidates, key=lambda c: c.number):
        now = widths[cand.number]
        base = cand.speedup(now)
        for target in allowed:
            slots = target - now if larger else now - target
            if slots <= 0 or (room is not None and slots > room):
                continue
            score = (cand.speedup(target) - base) / slots  # shrinking: minus the loss per slot freed
            if best is None or score > best[0]:
                best = (score, cand.number, target)
    return best


def _smallest_shrink(
    widths: dict[int, int], candidates: Sequence[Candidate], allowed: Sequence[int], wanted: int
) -> tuple[float, int, int] | None:
    """The best shrink freeing at most ``wanted`` slots, else the best of those freeing the fewest more."""
    for room in range(wanted, max(wanted, max(allowed)) + 1):  # more wanted than any shrink frees: the most
        step = _best_step(widths, candidates, allowed, room, larger=False)
        if step is not None:
            return step
    return None


def grow(
    candidates: Sequence[Candidate],
    free: int,
    widths: Sequence[int],
    reserve: int = 0,
    max_slots: int | None = None,
    min_gain: float = MIN_GAIN,
) -> Mapping[int, int]:
    """The new width of each trial that grows (``{trial: width}``; the others keep theirs)."""
    _check(widths, 1 if max_slots is None else max_slots, free)
    top = max(widths) if max_slots is None else max_slots
    allowed = sorted({w for w in widths if w <= top})
    now = {c.number: c.width for c in candidates}
    room = max(0, free - max(0, reserve))
    while room > 0:
        step = _best_step(now, candidates, allowed, room, larger=True)
        if step is None or step[0] < min_gain:
            break
        _score, number, target = step
        room -= target - now[number]
        now[number] = target
    return {c.number: now[c.number] for c in candidates if now[c.number] != c.width}


def shrink(candidates: Sequence[Candidate], needed: int, widths: Sequence[int]) -> Mapping[int, int]:
    """The new width of each trial that shrinks so that ``needed`` slots come free (as few as cost least speedup;
    fewer freed where the candidates cannot give that many)."""
    _check(widths, 1, max(0, needed))
    allowed = sorted(set(widths))
    now = {c.number: c.width for c in candidates}
    freed = 0
    while freed < needed:
        step = _smallest_shrink(now, candidates, allowed, needed - freed)
        if step is None:
            break
        _score, number, target = step
        freed += now[number] - target
        now[number] = target
    return {c.number: now[c.number] for c in candidates if now[c.number] != c.width}
