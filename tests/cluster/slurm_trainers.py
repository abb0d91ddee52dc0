"""A trainer for the real-SLURM tests: sleeps through its epochs, checkpoints each one, resumes from the last.

``options.sleep``: seconds per epoch; ``options.sleeps``, where given: seconds per epoch of trial 0, 1, ... (trials
past its end: ``sleep``); ``options.resumed``, where given: seconds per epoch of a trial that started from its
checkpoint (a cut trial's rest). ``options.log``: a file where every epoch run appends
``<trial number> <epoch> <SLURM job id>``, so a test sees which job ran which epoch (and that a trial cut by its
job's end resumed from its checkpoint: no epoch twice).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from trainers.api import Reporter, TrialConfig


def resumable(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    folder = Path(config.checkpoint_dir or ".")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "state.json"
    state = json.loads(path.read_text()) if path.exists() else {"epoch": 0, "history": []}
    for epoch, metrics in enumerate(state["history"], start=1):
        reporter.report(epoch, metrics)
    metrics = state["history"][-1] if state["history"] else {}
    seconds = epoch_seconds(config, resumed=int(state["epoch"]) > 0)
    for epoch in range(int(state["epoch"]) + 1, config.epochs + 1):
        time.sleep(seconds)
        metrics = {"score": float(config.params["quality"]) * epoch / config.epochs}
        with open(config.options["log"], "a") as log:
            log.write(f"{config.number} {epoch} {os.environ.get('SLURM_JOB_ID', '')}\n")
        state = {"epoch": epoch, "history": [*state["history"], metrics]}
        part = path.with_suffix(".part")
        part.write_text(json.dumps(state))
        os.replace(part, path)
        reporter.report(epoch, metrics)
        if reporter.should_stop():
            break
    return dict(metrics)


def epoch_seconds(config: TrialConfig, resumed: bool) -> float:
    """How long each epoch of this run of the trial sleeps (see the module's docstring)."""
    options = config.options
    if resumed and "resumed" in options:
        return float(options["resumed"])
    sleeps = options.get("sleeps", ())
    if config.number < len(sleeps):
        return float(sleeps[config.number])
    return float(options.get("sleep", 0.0))


resumable.accepted_params = frozenset({"quality"})  # type: ignore[attr-defined]
resumable.reported_metrics = frozenset({"score"})  # type: ignore[attr-defined]
