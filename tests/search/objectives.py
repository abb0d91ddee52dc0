"""Optuna objectives, written as for plain Optuna, for ``search.optimize`` tests (run on real Dask workers).

``tutorial`` follows Optuna's first tutorial's shape: a categorical branch with conditional parameters, intermediate
values reported each step and ``should_prune`` after each. What a trial does beyond that depends on its number only,
so every test can tell which trial did what, whatever the sampler picked and whatever the timing.
"""

from __future__ import annotations

import json
import os
from typing import Any

import optuna

FAILS = 2  # this trial's objective raises
PRUNES_ITSELF = 3  # ... raises TrialPruned with no pruner asking
RESERVED = 4  # ... sets a user attribute the campaign keeps for itself (the controller refuses it)
THRESHOLD = 5.0  # ThresholdPruner(upper=THRESHOLD): a trial reporting more is pruned at its first step
STEPS = 3


def tutorial(trial: Any) -> float:
    kind = trial.suggest_categorical("kind", ["quadratic", "absolute"])
    x = trial.suggest_float("x", 0.0, 10.0)
    if kind == "quadratic":
        y = trial.suggest_int("y", 0, 4)
        lr = trial.suggest_float("lr", 1e-4, 1e-1, log=True)
        value = x + y * lr
    else:
        value = x
    if trial.number == FAILS:
        raise ValueError("this objective fails on purpose")
    if trial.number == PRUNES_ITSELF:
        raise optuna.TrialPruned()
    if trial.number == RESERVED:
        trial.set_user_attr("config", "mine")
    for step in range(STEPS):
        trial.report(value + STEPS - 1 - step, step)
        if trial.should_prune():
            raise optuna.TrialPruned()
    trial.set_user_attr("branch", kind)
    return value


def two_objectives(trial: Any) -> tuple[float, float]:
    x = trial.suggest_float("x", -1.0, 1.0)
    return x, x * x


def dies_once(trial: Any) -> float:
    """Its first run saves its suggestion in its checkpoint folder and kills its worker; the retry compares."""
    x = trial.suggest_float("x", 0.0, 1.0)
    saved = trial.checkpoint_dir / "checkpoint.json"
    if not saved.exists():
        saved.write_text(json.dumps({"x": x}))
        os._exit(3)  # the worker process dies mid-trial: the controller runs the trial again
    trial.set_user_attr("resumed_from", str(saved))
    return abs(json.loads(saved.read_text())["x"] - x)  # 0.0: the retry got the suggestion the first run saved


def where_it_runs(trial: Any) -> float:
    """Records the process it runs in and what it sees of its GPU lease."""
    x = trial.suggest_float("x", 0.0, 1.0)
    trial.set_user_attr("visible", os.environ.get("CUDA_VISIBLE_DEVICES"))
    trial.set_user_attr("leased", list(trial.devices))
    trial.set_user_attr("pid", os.getpid())
    return x
