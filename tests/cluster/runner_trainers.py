"""Trainers for the slot-runner tests, imported by name on real worker processes: each run leaves a line in a file,
so a test counts how often a trial ran."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def counted_fit(config: Any, reporter: Any) -> dict[str, float]:
    """Append this trial's number to ``options.runs``; sleep ``options.sleep`` (``options.long`` for trial 0)."""
    options = dict(config.options)
    with Path(options["runs"]).open("a") as runs:
        runs.write(f"{config.number} {os.getpid()}\n")
    seconds = float(options["long"] if config.number in options.get("long_trials", [0]) else options["sleep"])
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        reporter.report(1, {"score": float(config.number)})
        if reporter.should_stop():
            break
        time.sleep(0.05)
    return {"score": float(config.number)}


def dies_once_fit(config: Any, reporter: Any) -> dict[str, float]:
    """Exit this worker process the first time any trial runs (``options.marker`` does not exist yet)."""
    marker = Path(dict(config.options)["marker"])
    if not marker.exists():
        marker.write_text(str(os.getpid()))
        os._exit(1)
    return {"score": float(config.number)}
