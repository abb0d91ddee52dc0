"""What every trial of ``bench.overhead`` does, whichever peer runs it: sleep, time itself, score two floats;
the utilization its timings give; the samplers (one that sleeps per ask: (d))."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import optuna

__all__ = [
    "SLOTS",
    "SPACE",
    "DelayedSampler",
    "make_sampler",
    "naive_task",
    "optuna_objective",
    "read_timings",
    "score",
    "steady_utilization",
    "timed_sleep",
    "utilization",
]

SLOTS = 4
SPACE = {"x": {"type": "float", "low": 0.0, "high": 1.0}, "y": {"type": "float", "low": 0.0, "high": 1.0}}


def score(x: float, y: float) -> float:
    return -((x - 0.3) ** 2) - (y - 0.3) ** 2


def timed_sleep(timing_dir: str, sleep: float) -> tuple[float, float]:
    """The trial body: sleep, then append (t0, t1) to this process's timing file."""
    t0 = time.time()
    if sleep:
        time.sleep(sleep)
    t1 = time.time()
    with open(os.path.join(timing_dir, f"{os.getpid()}-{threading.get_ident()}.txt"), "a") as fh:
        fh.write(f"{t0!r} {t1!r}\n")
    return t0, t1


def optuna_objective(trial: optuna.Trial, timing_dir: str, sleep: float) -> float:
    x, y = trial.suggest_float("x", 0.0, 1.0), trial.suggest_float("y", 0.0, 1.0)
    timed_sleep(timing_dir, sleep)
    return score(x, y)


def naive_task(x: float, y: float, timing_dir: str, sleep: float) -> float:
    timed_sleep(timing_dir, sleep)
    return score(x, y)


def read_timings(timing_dir: str) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for path in Path(timing_dir).glob("*.txt"):
        for line in path.read_text().splitlines():
            a, b = line.split()
            out.append((float(a), float(b)))
    return out


def utilization(spans: Sequence[tuple[float, float]], slots: int = SLOTS) -> float:
    """Sum of trial durations / (slots x (last end - first start))."""
    if not spans:
        return float("nan")
    window = max(e for _, e in spans) - min(s for s, _ in spans)
    return sum(e - s for s, e in spans) / (slots * window) if window > 0 else float("nan")


def steady_utilization(spans: Sequence[tuple[float, float]], slots: int = SLOTS) -> float:
    """Busy fraction of the slots between the start of the ``slots``-th trial and the start of the last.

    The ramp-up (the first wave, sampled one after another by any design) and the
    drain (nothing left to start) are left out: what remains is whether a freed
    slot got its next trial while the sampler was busy with others.
    """
    starts = sorted(s for s, _ in spans)
    if len(starts) <= slots:
        return float("nan")
    lo, hi = starts[slots - 1], starts[-1]
    if hi <= lo:
        return float("nan")
    busy = sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in spans)
    return busy / (slots * (hi - lo))


class DelayedSampler(optuna.samplers.BaseSampler):
    """A sampler that takes ``delay`` seconds per ask (in ``before_trial``), then samples like ``inner``.

    It stands in for GP or TPE on a large study (seconds per ask) without the CPU
    load, so the measurement shows scheduling, not a fight over two cores.
    """

    def __init__(self, inner: optuna.samplers.BaseSampler, delay: float) -> None:
        self.inner, self.delay = inner, float(delay)

    def before_trial(self, study, trial):  # type: ignore[no-untyped-def]
        time.sleep(self.delay)
        self.inner.before_trial(study, trial)

    def infer_relative_search_space(self, study, trial):  # type: ignore[no-untyped-def]
        return self.inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):  # type: ignore[no-untyped-def]
        return self.inner.sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):  # type: ignore[no-untyped-def]
        return self.inner.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study, trial, state, values):  # type: ignore[no-untyped-def]
        self.inner.after_trial(study, trial, state, values)


def make_sampler(name: str, seed: int, delay: float = 0.0) -> optuna.samplers.BaseSampler:
    if name == "tpe":
        inner: optuna.samplers.BaseSampler = optuna.samplers.TPESampler(seed=seed)
    elif name == "random":
        inner = optuna.samplers.RandomSampler(seed=seed)
    else:
        raise ValueError(f"sampler {name!r}: must be random or tpe")
    return DelayedSampler(inner, delay) if delay > 0 else inner
