"""When the campaign ends: its expected end with a 90% interval, from the trial model.

The work left is the running trials' predicted time left (each on its slots) and, for the trials not started
yet, one more trial's expected cost in slot-seconds each (:meth:`~search.loop.costs.TrialCosts.per_trial`: the
mean of the trials that ended, pruned and failed ones in it, so the pruning and failure rates seen so far are in
it). Each trial to start goes to the slot that frees first (the running trials' slots free at their time left), and
the campaign ends when the last slot does, so the last round's tail counts (a trial wider than one slot is taken as
its slot-seconds on one slot). The last trials' own spread puts the end later than their means: by the expected
largest of that many draws of one trial's spread.
The interval adds the running trials' own intervals and the spread of the trials to come (their sum's spread, and
the mean's own error) in quadrature. A time budget ends it no later than the budget's end; a budget in
slot-hours starts no more trials than fit in what is left.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cluster.trial_cost import Estimate
from cluster.trial_cost.estimate import Z90

__all__ = ["Eta", "EtaLog", "estimate_end", "duration_text", "read_eta_log", "residual"]

_NORMAL = statistics.NormalDist()
EXACT_ROUNDS = 50  # rounds of trials to start placed one by one; the rest are whole rounds


@dataclasses.dataclass(frozen=True)
class Eta:
    """Seconds until the campaign ends (``left``: a mean and a 90% interval), the trials still to start, and what
    ends it first (``""``: its trial budget; ``"time budget"``; ``"resource budget"``)."""

    left: Estimate
    to_start: int
    limited_by: str = ""

    def text(self) -> str:
        """``ends in ~4m10s (3m50s-4m40s)``."""
        left = self.left
        span = f" ({duration_text(left.low)}-{duration_text(left.high)})" if left.high > left.low else ""
        by = f", at its {self.limited_by}" if self.limited_by else ""
        return f"ends in ~{duration_text(left.mean)}{span}{by}"


def duration_text(seconds: float) -> str:
    """``45s``, ``4m10s``, ``2h05m``, ``3d04h``."""
    s = int(round(max(0.0, seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _expected_max(k: int) -> float:
    """The expected largest of ``k`` standard normal draws (Blom's approximation; 0 for one)."""
    return _NORMAL.inv_cdf((k - 0.375) / (k + 0.25)) if k > 1 else 0.0


def _drained(running: Sequence[tuple[Estimate, int]], to_start: int, cost: float, slots: int) -> float:
    """When the last trial ends: the trials to start, ``cost`` seconds on one slot each, go to the slot that frees
    first (the running trials' slots free at their mean time left); past :data:`EXACT_ROUNDS` rounds, whole rounds
    are added to every slot at once."""
    free = sorted(left.mean for left, width in running for _ in range(width))[:slots]
    free += [0.0] * (slots - len(free))
    rounds = max(0, to_start // slots - EXACT_ROUNDS)
    if rounds:
        free = [t + rounds * cost for t in free]
        to_start -= rounds * slots
    heapq.heapify(free)
    for _ in range(to_start):
        heapq.heapreplace(free, free[0] + cost)
    return max(free)


def residual(full: Estimate, ran: float) -> Estimate:
    """What is left of a run of ``full`` seconds (a lognormal through its mean and 90% interval) that has run ``ran``
    seconds: the mean and 90% interval of ``D - ran`` given ``D > ran`` (a trial past its prediction is taken to be
    in its distribution's tail, not over)."""
    if not full.known or full.low <= 0 or full.high <= full.low:
        return Estimate(
            max(0.0, full.mean - ran), max(0.0, full.low - ran), max(0.0, full.high - ran), full.basis, full.n
        )
    sigma = math.log(full.high / full.low) / (2 * Z90)
    mu = math.log(full.mean) - sigma**2 / 2
    if ran <= 0:
        return full
    z = (math.log(ran) - mu) / sigma
    above = 1.0 - _NORMAL.cdf(z)
    if above < 1e-9:  # far past anything the model expected: it may end any moment
        return Estimate(0.0, 0.0, 0.0, full.basis, full.n)
    mean = math.exp(mu + sigma**2 / 2) * _NORMAL.cdf(sigma - z) / above - ran

    def quantile(p: float) -> float:
        return max(0.0, math.exp(mu + sigma * _NORMAL.inv_cdf(min(1 - 1e-12, 1 - above + p * above))) - ran)

    low, high = quantile(0.05), quantile(0.95)
    return Estimate(max(0.0, min(mean, high)), min(low, max(0.0, mean)), max(high, mean), full.basis, full.n)


def _spread(estimate: Estimate) -> float:
    """The standard deviation a 90% interval stands for."""
    return (estimate.high - estimate.low) / (2 * Z90)


def estimate_end(
    running: Sequence[tuple[Estimate, int]],
    to_start: int,
    per_trial: Estimate,
    slots: int,
    time_left: float | None = None,
    cost_left: float | None = None,
) -> Eta | None:
    """The end of a campaign with ``running`` trials (each one's seconds left and its width), ``to_start`` trials
    not started, each expected to cost ``per_trial`` slot-seconds, on ``slots`` slots; ``time_left``: seconds of
    its time budget (None: none); ``cost_left``: slot-seconds of its resource budget (None: none). None when the
    model cannot tell yet (a trial to start and no cost known, or a running trial's time left unknown)."""
    if any(not left.known for left, _w in running) or (to_start and not per_trial.known):
        return None
    committed = sum(left.mean * width for left, width in running)
    limited_by = ""
    if cost_left is not None and per_trial.mean > 0:
        fits = max(0, math.floor((cost_left - committed) / per_trial.mean))
        if fits < to_start:
            to_start, limited_by = fits, "resource budget"
    longest = max((left.mean for left, _w in running), default=0.0)
    mean = max(longest, _drained(running, to_start, per_trial.mean, max(1, slots)))
    last_round = min(max(1, slots), to_start + len(running))
    mean += _spread(per_trial) / math.sqrt(1.0 + 1.0 / max(1, per_trial.n)) * _expected_max(last_round)
    one = _spread(per_trial)
    n = max(1, per_trial.n)
    variance = sum((_spread(left) * width) ** 2 for left, width in running)
    variance += to_start * one**2 + (to_start * one) ** 2 / n  # the trials' own spread and the mean's error
    half = Z90 * math.sqrt(variance) / max(1, slots)
    low, high = max(longest, mean - half), mean + half
    if time_left is not None and high > time_left:
        mean, low, high = min(mean, time_left), min(low, time_left), max(0.0, time_left)
        limited_by = "time budget" if mean >= time_left else limited_by
    low = min(low, mean)
    return Eta(Estimate(mean, low, max(high, mean), per_trial.basis, per_trial.n), to_start, limited_by)


class EtaLog:
    """The expected ends along the way, for the report (``eta.jsonl``: a line each time another 2% of the trial
    budget is told, at most 50 per run): ``time`` (the campaign's clock), ``done`` (trials told), ``left``, ``low``,
    ``high`` (seconds)."""

    def __init__(self, path: Path, n_trials: int) -> None:
        self._path = path
        self._every = max(1, n_trials // 50)
        self._next = 0  # trials told by the next line

    def record(self, done: int, at: float, eta: Eta | None) -> None:
        if eta is None or done < self._next:
            return
        self._next = done + self._every
        line = {"time": at, "done": done, "left": eta.left.mean, "low": eta.left.low, "high": eta.left.high}
        try:
            with open(self._path, "a") as fh:
                fh.write(json.dumps(line) + "\n")
        except OSError:  # a full disk: the report goes without the line, the campaign on
            pass


def read_eta_log(path: Path) -> list[dict[str, Any]]:
    """The lines of an ``eta.jsonl`` that read (none where there is no file)."""
    lines: list[dict[str, Any]] = []
    if not path.is_file():
        return lines
    for text in path.read_text().splitlines():
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if isinstance(line, dict) and all(
            isinstance(line.get(k), (int, float)) for k in ("time", "left", "low", "high")
        ):
            lines.append(line)
    return lines
