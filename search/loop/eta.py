"""When the campaign ends: its expected end with a 90% interval, from the trial model.

The end is the last slot's, in a simulation of the schedule left, drawn many times (:data:`DRAWS`): each running
trial frees its slots at its time left, drawn from its prediction given how long it has run (:func:`residual`);
then the trials asked and waiting, and the trials not asked yet, start in turn on the slots that free first (a
trial of width ``w`` on the ``w`` that free first); a trial in flight whose segment ends at a rung goes on with its
later segments after its run, each at the chance it is promoted that far (:class:`Chain`). A trial to start costs
one of the trials seen (times the trend of their costs over the campaign: :func:`trend_of`), drawn from them
(the recent ones that ended, pruned and failed ones in it, so the pruning and failure rates seen so far are in
it, and the running ones at their predicted whole runs, so the long ones still running count before they end);
each draw first reweights them (a Bayesian bootstrap), so the interval carries the error of their mean too, and
scales them by a lognormal factor of median 1 whose spread is how far the campaign's mean cost has moved so far
(:func:`drift_of`: the sampler moves to cheaper or dearer trials as it converges, as likely by a factor as by its
inverse; a factor of mean 1 would put the median end early by ``exp(-drift^2 / 2)``: 21% with a drift of log 2).
The expected end is the median of the draws (the point whose absolute error is least in expectation; the mean
follows the long tail of the drift and of the draws' maximum) and its interval their 5% and 95% points: the waves
of a campaign of few trials per slot, the last round's longest trial and the slots left idle at the end are in it. Past :data:`EXACT_ROUNDS`
rounds of trials to start, the first ones are added to every slot as their sum. A time budget ends each draw no
later than the budget's end; a budget in slot-hours starts no more trials than fit in what is left.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cluster.trial_cost import Basis, Estimate
from cluster.trial_cost.estimate import Z90, duration_text

__all__ = [
    "Chain",
    "Eta",
    "EtaLog",
    "EtaRun",
    "InFlight",
    "estimate_end",
    "drift_of",
    "trend_of",
    "duration_text",
    "mean_error",
    "read_eta_runs",
    "residual",
]

_NORMAL = statistics.NormalDist()
DRAWS = 200  # draws of the schedule left, at most ...
MIN_DRAWS = 16  # ... and at least
WORK = 2_000_000  # slot-placements over all draws, at most (fewer draws for a large campaign)
EXACT_ROUNDS = 2  # rounds of trials to start placed in turn; the ones before are added to every slot as a sum
CHUNKS = 64  # a round of trials to start is placed in at most this many turns (exact up to 64 slots)
SEED = 52  # each working-out draws the same way: the same campaign gives the same expected end
ONE_COST_DRIFT = math.log(2.0)  # the log-spread of the trials to start's mean cost when one cost is all there is
MAX_DRIFT = 1.5  # at most (a factor of 4.5 at one standard deviation)
MIN_TREND_POINTS = 6  # trials seen a trend in their costs is fitted on, at least
TREND_T = 2.0  # a trend's slope counts past this many standard errors (shrunk by 1 - (TREND_T / t)^2)
MAX_TREND = 3.0  # the trend's factor on the trials to start's cost, at most (and at least its inverse)


@dataclasses.dataclass(frozen=True)
class InFlight:
    """A trial sent out: its predicted whole run (``full``, seconds), how long it has run, its width, and whether a
    worker began it (``False``: queued, it starts when slots free)."""

    full: Estimate
    ran: float
    width: int
    started: bool = True


@dataclasses.dataclass(frozen=True)
class Chain:
    """The later segments a trial in flight may run once its run ends (a trial promoted at a rung goes on from its
    checkpoint: :mod:`search.loop.later_segments`): ``after``, its index among the trials in flight; each segment's
    seconds (its restart in them), and the chance it runs (they run in turn: each one's chance is at most the one's
    before); ``width``: their slots."""

    after: int
    seconds: tuple[Estimate, ...]
    chances: tuple[float, ...]
    width: int = 1


@dataclasses.dataclass(frozen=True)
class Eta:
    """Seconds until the campaign ends (``left``: the expected end, the median of the draws, as its ``mean``, and a
    90% interval), the trials still to start, and what ends it first (``""``: its trial budget; ``"time budget"``;
    ``"resource budget"``)."""

    left: Estimate
    to_start: int
    limited_by: str = ""

    def aged(self, seconds: float) -> Eta:
        """The same end seen ``seconds`` later (it was worked out that long ago)."""
        if seconds <= 0:
            return self
        e = self.left
        left = Estimate(max(0.0, e.mean - seconds), max(0.0, e.low - seconds), max(0.0, e.high - seconds), e.basis, e.n)
        return dataclasses.replace(self, left=left)

    def text(self) -> str:
        """``ends in ~4m10s (3m50s-4m40s)``."""
        left = self.left
        span = f" ({duration_text(left.low)}-{duration_text(left.high)})" if left.high > left.low else ""
        by = f", at its {self.limited_by}" if self.limited_by else ""
        return f"ends in ~{duration_text(left.mean)}{span}{by}"


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


def _lognormal(full: Estimate) -> tuple[float, float] | None:
    """``(mu, sigma)`` of the lognormal through ``full``'s mean and 90% interval (None: no spread to fit)."""
    if not full.known or full.mean <= 0 or full.low <= 0 or full.high <= full.low:
        return None
    sigma = math.log(full.high / full.low) / (2 * Z90)
    return math.log(full.mean) - sigma**2 / 2, sigma


def _lefts(trials: Sequence[InFlight], draws: int, rng: np.random.Generator) -> np.ndarray:
    """Each trial's seconds left in each draw (``trials x draws``): its whole run drawn given that it has run so long
    (a trial past anything its prediction expected may end any moment)."""
    from scipy.special import ndtr, ndtri

    out = np.zeros((len(trials), draws))
    fits = [_lognormal(t.full) for t in trials]
    plain = [i for i, fit in enumerate(fits) if fit is None]
    out[plain] = np.array([max(0.0, trials[i].full.mean - trials[i].ran) for i in plain])[:, None] if plain else 0.0
    pairs = [(i, fit) for i, fit in enumerate(fits) if fit is not None]
    if pairs:
        drawn = [i for i, _fit in pairs]
        mu = np.array([fit[0] for _i, fit in pairs])[:, None]
        sigma = np.array([fit[1] for _i, fit in pairs])[:, None]
        ran = np.array([trials[i].ran for i in drawn])[:, None]
        below = np.where(ran > 0, ndtr((np.log(np.maximum(ran, 1e-300)) - mu) / sigma), 0.0)
        u = np.clip(below + rng.random((len(drawn), draws)) * (1.0 - below), 1e-12, 1 - 1e-12)
        out[drawn] = np.where(below > 1 - 1e-9, 0.0, np.maximum(0.0, np.exp(mu + sigma * ndtri(u)) - ran))
    return out


def _place(free: np.ndarray, seconds: np.ndarray, width: np.ndarray) -> np.ndarray:
    """One trial in each draw (a row of ``free``: when each slot frees), ``seconds`` on the ``width`` slots that free
    first; its end in each draw."""
    rows = np.arange(len(free))
    if (width == 1).all():
        first = free.argmin(axis=1)
        free[rows, first] += seconds
        return np.asarray(free[rows, first])
    free.sort(axis=1)
    start = free[rows, np.minimum(width, free.shape[1]) - 1]
    taken = np.arange(free.shape[1])[None, :] < width[:, None]
    free[taken] = np.broadcast_to((start + seconds)[:, None], free.shape)[taken]
    return np.asarray(start + seconds)


def _place_after(free: np.ndarray, seconds: np.ndarray, width: int, after: np.ndarray, runs: np.ndarray) -> np.ndarray:
    """A trial's next segment in each draw where it ``runs``: ``seconds`` on the ``width`` slots that free first,
    not before ``after`` (its run before it ends then); its end in each draw (``after`` where it does not run)."""
    rows = np.arange(len(free))[:, None]
    first = np.argsort(free, axis=1)[:, : min(width, free.shape[1])]
    start = np.maximum(free[rows[:, 0], first[:, -1]], after)
    end = start + seconds
    free[rows, first] = np.where(runs[:, None], end[:, None], free[rows, first])
    return np.where(runs, end, after)


def _place_round(free: np.ndarray, seconds: np.ndarray) -> None:
    """``seconds`` (draws x n, n at most the slots) of trials of one slot each, on the ``n`` slots that free first
    (placed together: exact for n = 1)."""
    n = seconds.shape[1]
    first = np.argpartition(free, n - 1, axis=1)[:, :n] if n < free.shape[1] else np.argsort(free, axis=1)
    order = np.argsort(np.take_along_axis(free, first, axis=1), axis=1)
    first = np.take_along_axis(first, order, axis=1)
    free[np.arange(len(free))[:, None], first] += seconds


def _ends(
    lefts: np.ndarray,
    started: Sequence[InFlight],
    fulls: np.ndarray,
    queued: Sequence[InFlight],
    seen: tuple[np.ndarray, np.ndarray],
    to_start: int,
    slots: int,
    rng: np.random.Generator,
    drift: float = 0.0,
    chains: Sequence[tuple[np.ndarray, Chain]] = (),
) -> np.ndarray:
    """Each draw's end: the ``started`` trials (``lefts``: seconds left, trials x draws) hold their slots, the
    ``queued`` ones (``fulls``), then the ``chains``' later segments (each after its trial's run: ``ends``, index
    ``after`` among the started then the queued), and ``to_start`` trials drawn from ``seen`` (slot-seconds,
    widths), reweighted per draw and scaled by a lognormal factor of median 1 and log-spread ``drift``, start as
    slots free."""
    draws = lefts.shape[1]
    free = np.zeros((draws, slots))
    columns = np.repeat(np.arange(len(started)), [t.width for t in started])
    free[:, : len(columns)] = lefts[columns].T
    ends = list(lefts)
    for i, trial in enumerate(queued):
        ends.append(_place(free, fulls[i], np.full(draws, trial.width)))
    for seconds, chain in chains:  # seconds: segments x draws
        after, u = ends[chain.after], rng.random(draws)
        for k, chance in enumerate(chain.chances):
            after = _place_after(free, seconds[k], chain.width, after, np.less(u, chance))
    costs, widths = seen
    weights = rng.dirichlet(np.ones(len(costs)), size=draws) if len(costs) > 1 else np.ones((draws, len(costs)))
    scale = np.exp(drift * _normal_quantiles(draws, rng))  # the trials to start cost this times the seen
    rounds = max(0, to_start // slots - EXACT_ROUNDS)
    if rounds:  # the rounds before the last ones: their sum on every slot
        mean = weights @ costs
        spread = np.sqrt(np.maximum(0.0, weights @ costs**2 - mean**2) * rounds)
        sums = (rounds * mean)[:, None] + rng.normal(size=free.shape) * spread[:, None]
        free += np.clip(sums, rounds * costs.min(), rounds * costs.max()) * scale[:, None]  # a sum lies between
    exact = to_start - rounds * slots
    if not exact:
        return free.max(axis=1)
    cumulative = np.cumsum(weights, axis=1)
    picks = np.stack([np.searchsorted(c, rng.random(exact) * c[-1]) for c in cumulative])
    picks = np.minimum(picks, len(costs) - 1)
    seconds, width = costs[picks] / widths[picks] * scale[:, None], widths[picks]
    if (widths == 1).all():
        chunk = max(1, slots // CHUNKS)
        for at in range(0, exact, chunk):
            _place_round(free, seconds[:, at : at + chunk])
    else:
        for at in range(exact):
            _place(free, seconds[:, at], width[:, at])
    return free.max(axis=1)


def _normal_quantiles(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` standard normal draws, one in each ``1/n`` of its probability, in a random order (their median is 0,
    not a draw's error of ``1.25 / sqrt(n)``: a drift's factor then leaves the expected end where it is)."""
    from scipy.special import ndtri

    return np.asarray(ndtri((rng.permutation(n) + 0.5) / n))


def mean_error(costs: Sequence[float] | np.ndarray) -> float:
    """The log-spread of the error of the mean of ``costs`` as the mean of others like them (their log standard
    deviation over the square root of their count; one cost: :data:`ONE_COST_DRIFT`)."""
    logs = np.log([c for c in costs if c > 0 and math.isfinite(c)])
    if len(logs) < 2:
        return ONE_COST_DRIFT
    return float(np.std(logs, ddof=1) / math.sqrt(len(logs)))


def trend_of(seen: Sequence[tuple[float, float]], future: tuple[float, float]) -> float:
    """The factor by which the trials to start cost more (or less) than the trials ``seen`` (``(order, cost)``: a
    trial's number, its cost) on average, by the trend of the costs over the campaign: the least-squares slope of
    log cost on the order, shrunk to 0 by ``1 - (TREND_T / t)^2`` (0 where its t statistic is under
    :data:`TREND_T`: a sampler whose costs only scatter has none), times how far each trial to start's order (from
    ``future[0]`` to ``future[1]``) is past the seen trials' mean (at most the orders' span seen: no further than
    the data); the mean of the factors over the trials to start, within ``1 / MAX_TREND`` and :data:`MAX_TREND`.

    Why a trend and not the mean of the recent trials: a sampler that selects moves the costs steadily. Regularized
    evolution mutates the winners of tournaments among the population (the most recent trials), and the winners
    of a size-limited CNN space are the bigger networks: the children grow (examples/digits-evolution.toml: 1.5-4.5 s
    early, 4-9 s later), and a mean of the trials seen, however recent, lags by half its window. TPE converging on
    dearer (or cheaper) configurations moves them the same way. The trials in flight count at their predicted whole
    runs, so the short ones that end first do not make a trend of their own."""
    points = [(x, math.log(c)) for x, c in seen if c > 0 and math.isfinite(c)]
    if len(points) < MIN_TREND_POINTS:
        return 1.0
    x = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] for p in points])
    dx = x - x.mean()
    sxx = float(dx @ dx)
    if sxx <= 0:
        return 1.0
    slope = float(dx @ (y - y.mean())) / sxx
    residual = y - y.mean() - slope * dx
    error = math.sqrt(float(residual @ residual) / (len(points) - 2) / sxx)
    t = abs(slope) / error if error > 0 else math.inf
    shrunk = slope * max(0.0, 1.0 - (TREND_T / t) ** 2) if t > 0 else 0.0
    orders = np.linspace(future[0], max(future), 64)
    reach = np.clip(orders - float(x.mean()), 0.0, float(x.max() - x.min()))
    factor = float(np.mean(np.exp(np.clip(shrunk * reach, -10.0, 10.0))))
    return float(np.clip(factor, 1.0 / MAX_TREND, MAX_TREND))


def drift_of(history: Sequence[float], window: int) -> float:
    """How far the mean cost of the next ``window`` trials has been from the last ``window``'s, in the campaign's
    history of costs (in the order they ended): the root mean square of the log ratios of the means of consecutive
    windows (the sampler's drift to other costs as it converges, and the error of a mean of few, together); shrunk
    to :func:`mean_error` of the last window by one pair (0 pairs: that alone)."""
    window = max(2, window)
    costs = [c for c in history if c > 0 and math.isfinite(c)]
    means = [statistics.fmean(costs[i - window : i]) for i in range(len(costs), window - 1, -window)]
    ratios = [math.log(a / b) for a, b in zip(means, means[1:])]
    prior = mean_error(costs[-window:])
    return math.sqrt((sum(r * r for r in ratios) + prior * prior) / (len(ratios) + 1))


def _draws(to_start: int, slots: int) -> int:
    """How many draws of the schedule left: :data:`DRAWS`, fewer where each costs more (:data:`WORK`)."""
    turns = min(to_start, (EXACT_ROUNDS + 1) * slots)
    turns = turns if slots <= CHUNKS else math.ceil(turns / (slots // CHUNKS))
    return max(MIN_DRAWS, min(DRAWS, WORK // max(1, turns * slots)))


def estimate_end(
    in_flight: Sequence[InFlight],
    to_start: int,
    seen: Sequence[tuple[float, int]],
    slots: int,
    time_left: float | None = None,
    cost_left: float | None = None,
    drift: float = 0.0,
    later: Sequence[Chain] = (),
) -> Eta | None:
    """The end of a campaign with ``in_flight`` trials and ``to_start`` trials not sent out, each costing one of the
    trials ``seen`` (slot-seconds, width), on ``slots`` slots; ``time_left``: seconds of its time budget (None:
    none); ``cost_left``: slot-seconds of its resource budget not spent or committed to the trials in flight (None:
    none); ``drift``: how far (log-spread) the trials to start may cost more or less than those seen on average
    (:func:`drift_of` the campaign's costs; 0: none beyond the error of their mean); ``later``: the later segments
    the trials in flight may run (:class:`Chain`; a segment whose seconds are not known is left out). None when the
    model cannot tell yet (a trial to start and no cost seen, or a trial in flight whose run is not known)."""
    if any(not t.full.known for t in in_flight) or (to_start and not seen):
        return None
    costs = np.array([max(0.0, c) for c, _w in seen]) if seen else np.zeros(1)
    widths = np.array([max(1, w) for _c, w in seen]) if seen else np.ones(1, dtype=int)
    limited_by = ""
    if cost_left is not None and costs.mean() > 0:
        fits = max(0, math.floor(cost_left / costs.mean()))
        if fits < to_start:
            to_start, limited_by = fits, "resource budget"
    started = [t for t in in_flight if t.started]
    queued = [t for t in in_flight if not t.started]
    slots = max(1, slots, sum(t.width for t in started))
    draws = _draws(to_start + len(queued), slots)
    rng = np.random.default_rng(SEED)
    lefts = _lefts(started, draws, rng)
    fulls = _lefts([dataclasses.replace(t, ran=0.0) for t in queued], draws, rng)
    drift = min(MAX_DRIFT, drift) if math.isfinite(drift) and drift > 0 else 0.0
    order = [i for i, t in enumerate(in_flight) if t.started] + [i for i, t in enumerate(in_flight) if not t.started]
    at = {i: k for k, i in enumerate(order)}  # a trial in flight's place among the started, then the queued
    chains = [
        (
            _lefts([InFlight(e, 0.0, chain.width) for e in chain.seconds], draws, rng),
            dataclasses.replace(chain, after=at[chain.after]),
        )
        for chain in later
        if chain.seconds and all(e.known for e in chain.seconds) and chain.after in at
    ]
    ends = _ends(lefts, started, fulls, queued, (costs, widths), to_start, slots, rng, drift, chains)
    if time_left is not None:
        if float(np.mean(ends >= time_left)) >= 0.5:
            limited_by = "time budget"
        ends = np.minimum(ends, max(0.0, time_left))
    low, high = (float(q) for q in np.quantile(ends, (0.05, 0.95)))
    mean = float(np.median(ends))  # the expected end: the median (see the module's docstring)
    return Eta(Estimate(mean, min(low, mean), max(high, mean), Basis.SAMPLE, len(seen)), to_start, limited_by)


class EtaLog:
    """The expected ends along the way, for the report (``eta.jsonl``: a line each time another 2% of the trial
    budget is told, at most 50 per run): ``time`` (the campaign's clock), ``done`` (trials told), ``left``, ``low``,
    ``high`` (seconds) and ``run``; at the run's end (:meth:`close`: its last trial ended and none is left to
    start), ``{"run", "ended"}``. Each run of the campaign loop on the folder (a resume, a scaling sweep's round) is
    a campaign of its own with an end of its own: ``run`` numbers them (0, 1, ...: one more than the file's last)."""

    def __init__(self, path: Path, n_trials: int) -> None:
        self._path = path
        self._every = max(1, n_trials // 50)
        self._next = 0  # trials told by the next line
        self._run = 1 + max((line["run"] for line in _lines(path) if isinstance(line.get("run"), int)), default=-1)
        self._wrote = self._closed = False

    def record(self, done: int, at: float, eta: Eta | None) -> None:
        if eta is None or done < self._next or self._closed:
            return
        self._next = done + self._every
        left = eta.left
        self._write({"time": at, "done": done, "left": left.mean, "low": left.low, "high": left.high, "run": self._run})

    def close(self, at: float) -> None:
        """The run ended at ``at`` (the campaign's clock; once; nothing where it recorded no expected end)."""
        if self._wrote and not self._closed:
            self._write({"run": self._run, "ended": at})
            self._closed = True

    def _write(self, line: dict[str, Any]) -> None:
        try:
            with open(self._path, "a") as fh:
                fh.write(json.dumps(line) + "\n")
            self._wrote = True
        except OSError:  # a full disk: the report goes without the line, the campaign on
            pass


@dataclasses.dataclass(frozen=True)
class EtaRun:
    """One run's expected ends (``lines``, in the order worked out) and its end (None: not recorded, a controller
    killed, or a file from before ``run``)."""

    number: int
    lines: tuple[dict[str, Any], ...]
    ended: float | None


def _lines(path: Path) -> list[dict[str, Any]]:
    """The lines of an ``eta.jsonl`` that read as JSON objects (none where there is no file)."""
    out: list[dict[str, Any]] = []
    try:
        text = path.read_text()
    except OSError:
        return out
    for row in text.splitlines():
        try:
            line = json.loads(row)
        except ValueError:
            continue
        if isinstance(line, dict):
            out.append(line)
    return out


def _is_prediction(line: dict[str, Any]) -> bool:
    return all(isinstance(line.get(k), (int, float)) for k in ("time", "left", "low", "high"))


def read_eta_runs(path: Path) -> list[EtaRun]:
    """An ``eta.jsonl``'s runs in order, each with its expected ends and its end (a line without ``run``: run 0);
    runs without an expected end left out."""
    lines: dict[int, list[dict[str, Any]]] = {}
    ended: dict[int, float] = {}
    for line in _lines(path):
        run = line.get("run", 0)
        if not isinstance(run, int):
            continue
        if _is_prediction(line):
            lines.setdefault(run, []).append(line)
        elif isinstance(line.get("ended"), (int, float)):
            ended[run] = float(line["ended"])
    return [EtaRun(run, tuple(lines[run]), ended.get(run)) for run in sorted(lines)]
