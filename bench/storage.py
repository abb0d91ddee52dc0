"""Controller bookkeeping per trial (ask + 10 intermediate reports + user attributes + tell) by storage.

    python -m bench.storage [--trials 300] [--reps 3]

Medians over repetitions of the per-trial time, for the storages a campaign can
use: the group-commit journal (the default, ``[study] storage = ""``: one fsync per
controller loop iteration, flushed twice per trial here: the worst case), the SQLite
file (``storage = "sqlite"``: WAL, synchronous=NORMAL), Optuna's own journal file
backend (lock and fsync per call; for comparison, no campaign uses it to write) and
in-memory (not durable), in the same run.
Writes bench/results/storage.csv.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import optuna
import pandas as pd
from optuna.storages import BaseStorage, InMemoryStorage
from optuna.storages.journal import JournalFileBackend, JournalStorage

from search.store.storage import flusher, open_storage

DIST = {"x": optuna.distributions.FloatDistribution(0.0, 1.0), "y": optuna.distributions.IntDistribution(1, 64)}


def storages(folder: Path) -> dict[str, Callable[[], BaseStorage]]:
    return {
        "group-commit journal (default)": lambda: open_storage(f"journal:{folder / 'group.journal'}", writer=True),
        "sqlite": lambda: open_storage(f"sqlite:///{folder / 'study.db'}"),
        "optuna journal": lambda: JournalStorage(JournalFileBackend(str(folder / "plain.journal"))),
        "in-memory (not durable)": InMemoryStorage,
    }


def per_trial_ms(storage: BaseStorage, trials: int) -> float:
    study = optuna.create_study(storage=storage, sampler=optuna.samplers.RandomSampler(seed=0))
    flush = flusher(storage)
    started = time.perf_counter()
    for _ in range(trials):
        trial = study.ask(DIST)
        trial.set_user_attr("config", {"params": dict(trial.params), "seed": 1})
        flush()  # the campaign flushes once per loop iteration; here, after the dispatch...
        for step in range(10):
            trial.report(step / 10, step)
        for key in ("worker", "started", "finished", "metrics", "history"):
            trial.set_user_attr(key, 1.0)
        study.tell(trial, 0.5)
        flush()  # ...and after the result
    return 1000 * (time.perf_counter() - started) / trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = []
    for rep in range(args.reps):
        with tempfile.TemporaryDirectory() as tmp:
            for name, make in storages(Path(tmp)).items():
                rows.append({"storage": name, "rep": rep, "ms_per_trial": per_trial_ms(make(), args.trials)})
    frame = pd.DataFrame(rows)
    table = frame.groupby("storage", sort=False)["ms_per_trial"].agg(["median", "min", "max"])
    base = table.loc["group-commit journal (default)", "median"]
    table["x group-commit"] = table["median"] / base
    print(f"per trial (ask + 10 reports + 6 user attrs + tell), {args.trials} trials, median of {args.reps}:")
    print(table.to_string(float_format=lambda v: f"{v:.2f}"))
    out = Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    table.to_csv(out / "storage.csv")
    print(f"(statistics.median of all reps: {statistics.median(frame['ms_per_trial']):.2f} ms)")


if __name__ == "__main__":
    main()
