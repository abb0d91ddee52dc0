"""Trainers that fail as users' trainers do (issue 48): none declares its metrics, so only a run can find out.

- ``broken``: raises the same ``ValueError`` every time (after ``options["sleep"]`` seconds), until the file
  ``options["fixed"]`` exists;
- ``undeclared``: reports and returns ``score`` only, an epoch taking ``options["sleep"]`` seconds (a spec asking
  for another metric finds out at run time);
- ``objective``: returns a number, as an Optuna objective does (``options["pair"]``: a tuple of two);
- ``mixed``: by trial number: a number returned, a text report, a ``ValueError``, a number returned.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from trainers.api import Reporter, TrialConfig


def undeclared(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    score = 0.0
    for epoch in range(1, config.epochs + 1):
        time.sleep(float(config.options.get("sleep", 0.0)))  # an epoch of training
        score = float(config.params["quality"]) * epoch
        reporter.report(epoch, {"score": score})
    return {"score": score}


def broken(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    time.sleep(float(config.options.get("sleep", 0.0)))  # loads its data first
    if not Path(str(config.options["fixed"])).exists():
        raise ValueError("data folder /nonexistent/data not found")
    return undeclared(config, reporter)


def objective(config: TrialConfig, reporter: Reporter) -> Any:
    value = float(config.params["quality"])
    reporter.report(1, {"score": value})
    if config.options.get("pair"):
        return value, 1.0 - value
    return value


def mixed(config: TrialConfig, reporter: Reporter) -> Any:
    kind = config.number % 4
    if kind == 1:
        reporter.report(1, {"score": "abc"})
    if kind == 2:
        raise ValueError(f"trial {config.number} fails on purpose")
    return objective(config, reporter)
