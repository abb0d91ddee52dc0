"""ASHA with elastic widths against ASHA at a fixed width, on a simulated cluster (virtual time, no processes).

A discrete-event simulation of asynchronous successive halving (promotions first, else a new trial; rungs at
``eta^k`` epochs) on ``slots`` slots. Every setting sees the same trials (the same seeded configurations and
learning curves), so the settings differ only in the widths the trials run at:

- ``fixed-1``: every segment at width 1; ``fixed-W``: every segment at width W (the widest), ``slots // W`` trials
  at a time;
- ``elastic``: a new trial starts at width 1; a promoted trial's next segment gets the width
  :func:`search.elastic.allocate.grow` chooses from the free slots (a ``reserve`` kept while new trials remain),
  by the goodput it predicts from :func:`cluster.goodput.fit_step_model` fitted to the step times the trial
  measured so far (with the optimistic prior before it ran wider).

The cluster's throughput model is :class:`cluster.goodput.StepModel` (``T(w, m) = alpha_c + beta_c m + comm(w)``,
a ring all-reduce's constant and retrogression), the batch is fixed (statistical efficiency 1), and each segment
that resumes from a checkpoint pays a restart. What counts: the simulated time until the value the worst
setting ends with (the best all reach) is first reported, and each setting's final best.

    python -m bench.elastic [--seeds 5] [--slots 4 16 64]

Its own loop, not the campaign's: ``python -m bench.elastic_campaign`` runs the real Campaign with ``[elastic]
grow = "goodput"`` on :mod:`cluster.simulated` against the same fixed settings.
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import math
import statistics
from collections.abc import Sequence

import numpy as np

from cluster.goodput import Goodput, StepModel, StepTime, fit_step_model
from search.elastic.allocate import Candidate, grow

STEP = StepModel(alpha_c=0.005, beta_c=0.001, alpha_n=0.01, beta_n=0.002)  # seconds per step
BATCH = 128  # the global batch (fixed)
EXAMPLES = 10_000  # per epoch
RESTART = 5.0  # seconds to restart a segment from its checkpoint (a new rendezvous, the state loaded)
ETA, EPOCHS = 3, 27  # rungs at 1, 3, 9 epochs; the last segment ends at 27
WIDTHS = (1, 2, 4, 8)


@dataclasses.dataclass(frozen=True)
class Trial:
    """A configuration's learning curve: ``a - (a - 0.1) exp(-epoch / c)`` plus noise per report."""

    a: float
    c: float
    noise: tuple[float, ...]

    def value(self, epoch: int) -> float:
        return self.a - (self.a - 0.1) * math.exp(-epoch / self.c) + self.noise[epoch - 1]


def trials(n: int, seed: int) -> list[Trial]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = rng.uniform(0, 1, 2)
        a = 0.1 + 0.85 * math.exp(-float(((x - 0.3) ** 2).sum()) / 0.1)
        out.append(Trial(a, float(rng.uniform(2.0, 8.0)), tuple(float(v) for v in rng.normal(0, 0.003, EPOCHS))))
    return out


def rungs() -> list[int]:
    out, r = [], 1
    while r < EPOCHS:
        out.append(r)
        r *= ETA
    return [*out, EPOCHS]


@dataclasses.dataclass
class Run:
    """One setting's campaign: the events, ASHA's rung tables, the reports."""

    slots: int
    mode: str  # "elastic" or "fixed"
    width: int = 1  # fixed mode's width
    reserve: int = 1
    now: float = 0.0
    free: int = 0
    next_trial: int = 0
    reports: list[tuple[float, float]] = dataclasses.field(default_factory=list)  # (time, value)
    rung_values: dict[int, list[tuple[float, int]]] = dataclasses.field(default_factory=dict)
    promoted: dict[int, set[int]] = dataclasses.field(default_factory=dict)
    measured: dict[int, list[StepTime]] = dataclasses.field(default_factory=dict)

    def widths(self) -> tuple[int, ...]:
        return tuple(w for w in WIDTHS if w <= self.slots)


def _promotable(run: Run) -> tuple[int, int] | None:
    """(trial, rung index) of a trial in the top 1/eta of a rung and not yet promoted, highest rung first."""
    for k in sorted(run.rung_values, reverse=True):
        table = sorted(run.rung_values[k], reverse=True)
        top = table[: len(table) // ETA]
        for _value, number in top:
            if number not in run.promoted.setdefault(k, set()):
                return number, k
    return None


def _width_for(run: Run, number: int, new_trials_left: bool) -> int:
    if run.mode == "fixed":
        return run.width
    model = fit_step_model(run.measured.get(number) or [StepTime(1, BATCH, STEP.step_seconds(1, BATCH))])
    cand = Candidate(number, 1, Goodput(model, BATCH))
    reserve = run.reserve if new_trials_left else 0
    chosen = grow([cand], free=run.free - 1, widths=run.widths(), reserve=reserve)
    return chosen.get(number, 1)


def _step_seconds(width: int) -> float:
    return STEP.step_seconds(width, BATCH / width)


@dataclasses.dataclass
class Running:
    """A trial's segment under way: from when its steps run (after its restart), how many, at which width."""

    k: int
    width: int
    steps_from: float
    steps: float
    version: int

    def end(self) -> float:
        return self.steps_from + self.steps * _step_seconds(self.width)

    def steps_left(self, now: float) -> float:
        return max(0.0, self.steps - max(0.0, now - self.steps_from) / _step_seconds(self.width))


def simulate(pool: Sequence[Trial], slots: int, mode: str, width: int = 1) -> list[tuple[float, float]]:
    """The (time, value) of every rung report of one campaign over ``pool``."""
    run = Run(slots, mode, width, free=slots)
    ends = rungs()
    events: list[tuple[float, int, int]] = []  # (time, trial, version)
    running: dict[int, Running] = {}

    def launch(number: int, seg: Running) -> None:
        run.measured.setdefault(number, []).append(StepTime(seg.width, BATCH / seg.width, _step_seconds(seg.width)))
        running[number] = seg
        heapq.heappush(events, (seg.end(), number, seg.version))

    def start(number: int, k: int, w: int) -> None:
        begin = ends[k - 1] if k else 0
        run.free -= w
        launch(number, Running(k, w, run.now + (RESTART if k else 0.0), (ends[k] - begin) * EXAMPLES / BATCH, 0))

    def regrow() -> None:
        """Free slots and nothing to start: the promoted trials under way grow where goodput per slot gains most
        (each restarts from a checkpoint at its new width when that ends it sooner)."""
        cands = [
            Candidate(n, seg.width, Goodput(fit_step_model(run.measured[n]), BATCH))
            for n, seg in sorted(running.items())
            if seg.k > 0
        ]
        chosen = grow(cands, free=run.free, widths=run.widths(), reserve=0)
        for number, new_width in chosen.items():
            seg = running[number]
            left = seg.steps_left(run.now)
            moved = Running(seg.k, new_width, run.now + RESTART, left, seg.version + 1)
            if moved.end() < seg.end():
                run.free -= new_width - seg.width
                launch(number, moved)

    def fill() -> None:
        while True:
            need = width if mode == "fixed" else 1
            if run.free < need:
                return
            found = _promotable(run)
            left = run.next_trial < len(pool)
            if found is not None:
                number, k = found
                run.promoted[k].add(number)
                start(number, k + 1, _width_for(run, number, left))
            elif left:
                run.next_trial += 1
                start(run.next_trial - 1, 0, need)
            else:
                if mode == "elastic" and run.free:
                    regrow()
                return

    fill()
    while events:
        run.now, number, version = heapq.heappop(events)
        seg = running.get(number)
        if seg is None or seg.version != version:
            continue  # it was resized: a later event ends it
        del running[number]
        run.free += seg.width
        value = pool[number].value(ends[seg.k])
        run.reports.append((run.now, value))
        if seg.k < len(ends) - 1:
            run.rung_values.setdefault(seg.k, []).append((value, number))
        fill()
    return run.reports


def time_to(reports: Sequence[tuple[float, float]], target: float) -> float:
    return min(t for t, v in reports if v >= target)


def compare(slots: int, seed: int) -> dict[str, tuple[float, float]]:
    """Each setting's (time to the common target, final best) for one seed."""
    pool = trials(max(32, 4 * slots), seed)
    widest = max(w for w in WIDTHS if w <= slots)
    runs = {
        "fixed-1": simulate(pool, slots, "fixed", 1),
        f"fixed-{widest}": simulate(pool, slots, "fixed", widest),
        "elastic": simulate(pool, slots, "elastic"),
    }
    best = {name: max(v for _t, v in reports) for name, reports in runs.items()}
    target = min(best.values())
    return {name: (time_to(reports, target), best[name]) for name, reports in runs.items()}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--slots", type=int, nargs="+", default=[4, 16, 64])
    args = parser.parse_args(argv)
    print("slots  setting    time-to-target (median, s)  final best (median)  elastic speedup vs better fixed")
    for slots in args.slots:
        results = [compare(slots, seed) for seed in range(args.seeds)]
        names = list(results[0])
        speedups = []
        for r in results:
            fixed = min(r[n][0] for n in names if n != "elastic")
            speedups.append(fixed / r["elastic"][0])
        for name in names:
            t = statistics.median(r[name][0] for r in results)
            b = statistics.median(r[name][1] for r in results)
            extra = ""
            if name == "elastic":
                extra = f"median {statistics.median(speedups):.2f}x, min {min(speedups):.2f}x, max {max(speedups):.2f}x"
            print(f"{slots:5d}  {name:9s}  {t:26.0f}  {b:19.4f}  {extra}")


if __name__ == "__main__":
    main()
