"""Trainers that die at a named moment, for the fault tests: real processes killed with a real SIGKILL.

``killed_after_report``: the built-in classifier, whose worker process is SIGKILLed right after its report of
``options.kill_after`` reached the controller (its line is in ``metrics.jsonl``) and before the checkpoint
that covers it is written. ``options.kill_marker``: only while that file does not exist (it is created just
before the kill); without it, every run dies. Every start appends a line to ``<checkpoint_dir>/starts``.

``eats_memory``: appends a line to ``options.starts``, then allocates until its worker's nanny kills it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from trainers.api import Reporter, TrialConfig


def killed_after_report(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    from trainers.classifier import fit as classifier_fit

    options = dict(config.options)
    step = int(options.pop("kill_after"))
    marker = options.pop("kill_marker", "")
    folder = Path(config.checkpoint_dir or ".")
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "starts", "a") as fh:
        fh.write(f"{os.getpid()}\n")
    dies = not marker or not Path(marker).exists()
    wrapped = _KillAfter(reporter, step, folder / "metrics.jsonl", marker) if dies else reporter
    return classifier_fit(dataclasses.replace(config, options=options), wrapped)


class _KillAfter:
    """Passes reports on; after ``step``'s, waits until the controller wrote it down, then SIGKILLs this process."""

    def __init__(self, inner: Reporter, step: int, metrics: Path, marker: str) -> None:
        self._inner, self._step, self._metrics, self._marker = inner, step, metrics, marker

    def report(self, step: int, metrics: Any) -> None:
        self._inner.report(step, metrics)
        if step != self._step:
            return
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and step not in _steps(self._metrics):
            time.sleep(0.02)
        if self._marker:
            Path(self._marker).write_text("killed")
        os.kill(os.getpid(), signal.SIGKILL)  # after report(step), before its checkpoint

    def should_stop(self) -> bool:
        return self._inner.should_stop()


def _steps(path: Path) -> list[int]:
    try:
        return [int(json.loads(line)["step"]) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError, KeyError):
        return []


def eats_memory(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    with open(config.options["starts"], "a") as fh:
        fh.write(f"{config.number} {os.getpid()}\n")
    hoard = []
    for _ in range(400):  # 8 GB at most: the nanny ends this long before
        hoard.append(bytearray(20 * 2**20))
        time.sleep(0.02)
    raise RuntimeError("the worker's memory limit never stopped this trainer")


eats_memory.accepted_params = frozenset({"quality"})  # type: ignore[attr-defined]
eats_memory.reported_metrics = frozenset({"score"})  # type: ignore[attr-defined]
