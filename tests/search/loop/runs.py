"""A running trial built by hand for the cost model's tests: its worker, its epochs' report times, its start."""

from __future__ import annotations

import optuna

from search.loop.trials import RunningTrial
from trainers.api import TrialConfig


def run_on(worker: str, number: int, reports: list[float], started: float | None, epochs: int) -> RunningTrial:
    """Trial ``number``'s run of ``epochs`` epochs on ``worker`` ("": not placed yet), its epochs reported at
    ``reports`` (each loss 1.0), started at ``started`` (None: queued)."""
    study = optuna.create_study()
    for _ in range(number):
        study.ask()
    config = TrialConfig(study="s", number=number, params={}, seed=0, epochs=epochs)
    rows = [(step, {"loss": 1.0}, at) for step, at in enumerate(reports, 1)]
    return RunningTrial(study.ask(), config, 1, 0.0, reports=rows, started_at=started, worker=worker)
