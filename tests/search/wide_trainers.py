"""Trainers for trials wider than a worker, imported by name on the workers ("wide_trainers:...").

Each runs as one rank (the worker starts the ranks, :mod:`cluster.span_part`) and leaves a mark
``rank<r>-<pid>`` in ``options.marks``, so a test can see every rank and check that none outlives the trial.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from trainers.ddp import launch
from trainers.ddp_rank import current_rank, process_group


def _mark(config, rank: int) -> None:
    (Path(config.options["marks"]) / f"rank{rank}-{os.getpid()}").touch()


def epochs(config, reporter):
    """``epochs`` epochs of ``options.sleep`` s and one all-reduce each; stops when rank 0 is asked to."""
    info = current_rank()
    if info is None:
        return launch(f"{__name__}:epochs", config, reporter)
    _mark(config, info.rank)
    score = 0.0
    with process_group(torch.device("cpu")):
        for epoch in range(1, config.epochs + 1):
            time.sleep(float(config.options["sleep"]))
            total = torch.tensor([float(info.rank + 1)])
            dist.all_reduce(total)  # every rank takes part in every epoch
            score = float(config.params["quality"]) * epoch / config.epochs
            reporter.report(epoch, {"score": score, "rank_sum": float(total.item())})
            if reporter.should_stop():
                break
    return {"score": score}


def rank1_fails(config, reporter):
    """Rank 1 raises; rank 0 sleeps outside any collective, so only its part's abort can end it."""
    info = current_rank()
    if info is None:
        return launch(f"{__name__}:rank1_fails", config, reporter)
    _mark(config, info.rank)
    with process_group(torch.device("cpu")):
        if info.rank == 1:
            time.sleep(0.5)
            raise ValueError("rank 1 fails on purpose")
        time.sleep(300)
    return {"score": 0.0}


for _fn in (epochs, rank1_fails):
    _fn.accepted_params = frozenset({"quality"})  # type: ignore[attr-defined]
    _fn.reported_metrics = frozenset({"score", "rank_sum"})  # type: ignore[attr-defined]
