"""Tiny trainers for controller tests: real functions run on real Dask workers, no torch.

``fit``: the value climbs towards ``quality`` over the epochs; ``quality < 0`` raises,
``quality == 99`` returns NaN. ``options.sleep`` seconds per epoch. ``options.die_once = "<path>"``: the first trial to
start creates that file and kills its worker process (a lost worker, once).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from trainers.api import Reporter, TrialConfig


def fit(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    quality = float(config.params["quality"])
    marker = config.options.get("die_once")
    if marker and not Path(marker).exists():
        Path(marker).write_text(str(config.number))
        os._exit(3)  # the worker process dies mid-task
    if quality < 0:
        raise ValueError(f"quality {quality} is negative: this trial fails on purpose")
    sleep = float(config.options.get("sleep", 0.0))
    metrics: dict[str, float] = {}
    for epoch in range(1, config.epochs + 1):
        time.sleep(sleep)
        score = quality * epoch / config.epochs
        metrics = {"score": score, "epoch": float(epoch), "examples": float(100 * epoch), "steps": float(epoch)}
        reporter.report(epoch, metrics)
        if reporter.should_stop():
            break
    if quality == 99:
        metrics["score"] = float("nan")
    return metrics


fit.accepted_params = frozenset({"quality", "tag"})  # type: ignore[attr-defined]
fit.reported_metrics = frozenset({"score", "epoch", "examples", "steps"})  # type: ignore[attr-defined]


def own_lr(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    """A user's own trainer for report tests: reports its own ``lr`` (halved every epoch) and an ``error``.

    The trial number decides its fate, so a small campaign has all kinds: trial numbers in
    ``options.fail`` raise, those in ``options.bad`` report an error ten times the others'
    (a median pruner stops them), the rest improve with the number. ``lr`` and ``width``
    barely matter; ``schedule`` is accepted but ignored (this trainer has its own).
    """
    number = config.number
    if number in config.options.get("fail", ()):
        raise RuntimeError(f"trial {number} fails on purpose")
    sleep = float(config.options.get("sleep", 0.0))
    lr = float(config.params["lr"])
    final = (10.0 if number in config.options.get("bad", ()) else 1.0) / (number + 1) + 0.001 * config.params["width"]
    metrics: dict[str, float] = {}
    for epoch in range(1, config.epochs + 1):
        time.sleep(sleep)
        error = final * (1.0 + (config.epochs - epoch) / config.epochs)
        metrics = {"error": error, "lr": lr * 0.5 ** (epoch - 1), "epoch": float(epoch),
                   "examples": float(50 * epoch), "steps": float(10 * epoch)}
        reporter.report(epoch, metrics)
        if reporter.should_stop():
            break
    return metrics


own_lr.accepted_params = frozenset({"lr", "width", "schedule"})  # type: ignore[attr-defined]
own_lr.reported_metrics = frozenset({"error", "lr", "epoch", "examples", "steps"})  # type: ignore[attr-defined]
