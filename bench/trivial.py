"""A trivial trainer for benchmarks: sleeps, optionally reports, returns its own timing.

``options.sleep``: seconds the trial takes (slept in ``options.reports`` equal parts,
or in one piece without reports). The returned metrics carry ``t0``/``t1`` (wall
clock inside the trial), so slot utilization is measured from the trials themselves.
The score is a cheap function of whatever numeric params there are (random and TPE
need something to optimize); in simulated runs the executor's model supplies the
metrics instead and this function never runs.
"""

from __future__ import annotations

import time
from typing import Any


def score_of(params: dict[str, Any]) -> float:
    """A smooth bowl over the numeric params, best (0) at x = 0.3."""
    numbers = [float(v) for v in params.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return -sum((x - 0.3) ** 2 for x in numbers)


def fit(config: Any, reporter: Any) -> dict[str, float]:
    t0 = time.time()
    sleep = float(config.options.get("sleep", 0.0))
    reports = int(config.options.get("reports", 0))
    score = score_of(dict(config.params))
    for step in range(1, reports + 1):
        time.sleep(sleep / reports)
        reporter.report(step, {"score": score, "steps": float(step)})
        if reporter.should_stop():
            break
    if not reports and sleep:
        time.sleep(sleep)
    return {"score": score, "accuracy": score, "t0": t0, "t1": time.time()}
