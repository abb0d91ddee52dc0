"""ASHA vs no pruning on the digits study, at the same number of trials.

    python -m bench.asha [--trials 24] [--epochs 12] [--seeds 3] [--workers 2]

Runs real campaigns (embedded LocalCluster, real training) and prints, per
pruner: total epochs trained, wall time, best validation accuracy, and the stop
latency of pruned trials (report sent -> trial stopped; median and max).
Medians over the seeds; the table is also written to bench/results/asha.csv.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import tomllib
from pathlib import Path

import optuna
import pandas as pd
from optuna.storages.journal import JournalFileBackend, JournalStorage

from cluster import quiet_dask_logs
from search.session.runner import RunOptions, run_campaign
from search.spec.campaign_spec import parse_spec
from search.store.records import TrialRecord

SPEC = """
[study]
name = "{name}"
direction = "maximize"
metric = "val_accuracy"
sampler = "random"
seed = {seed}
n_trials = {trials}
pruner = "{pruner}"

[pruner]
resource = "examples"
reduction_factor = 3

[trainer]
entry = "trainers.classifier:fit"
dataset = "digits"
epochs = {epochs}

[space]
model = "mlp"
optimizer = {{ type = "categorical", choices = ["sgd", "adam"] }}
lr = {{ type = "float", low = 1e-4, high = 0.3, log = true }}
batch_size = {{ type = "batch_size", low = 16, high = 128 }}
hidden = {{ type = "int", low = 16, high = 256, step = 16 }}
schedule = "cosine"

[cluster]
n_workers = {workers}
"""


def run_one(pruner: str, seed: int, args: argparse.Namespace, root: Path) -> dict:
    name = f"{pruner}-{seed}"
    text = SPEC.format(
        name=name, seed=seed, trials=args.trials, pruner=pruner, epochs=args.epochs, workers=args.workers
    )
    spec = parse_spec(tomllib.loads(text), f"{name}.toml", text)
    started = time.perf_counter()
    folder = run_campaign(spec, RunOptions(runs_dir=root, progress=False))
    wall = time.perf_counter() - started
    study = optuna.load_study(study_name=name, storage=JournalStorage(JournalFileBackend(str(folder.journal))))
    trials = study.get_trials()
    records = [TrialRecord.of(t) for t in trials]
    latencies = [r.stop_latency for r in records if r.stop_latency is not None]
    return {
        "pruner": pruner,
        "seed": seed,
        "epochs_trained": sum(len(r.recorded_history) for r in records),
        "wall_s": wall,
        "best_val_accuracy": study.best_value,
        "pruned": sum(t.state == optuna.trial.TrialState.PRUNED for t in trials),
        "stop_latency_median_ms": 1000 * statistics.median(latencies) if latencies else float("nan"),
        "stop_latency_max_ms": 1000 * max(latencies) if latencies else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "error")  # worker processes inherit it
    quiet_dask_logs()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            for pruner in ("none", "asha"):
                rows.append(run_one(pruner, seed, args, Path(tmp)))
                print(rows[-1], flush=True)
    frame = pd.DataFrame(rows)
    medians = frame.drop(columns="seed").groupby("pruner", sort=False).median()
    none, asha = medians.loc["none"], medians.loc["asha"]
    print("\nmedians over", args.seeds, "seeds:\n", medians.to_string(float_format=lambda v: f"{v:.4g}"))
    print(
        f"\nASHA trained {none.epochs_trained / asha.epochs_trained:.2f}x fewer epochs, "
        f"best accuracy {asha.best_val_accuracy - none.best_val_accuracy:+.4f} vs no pruning, "
        f"wall time x{asha.wall_s / none.wall_s:.2f}"
    )
    out = Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    frame.to_csv(out / "asha.csv", index=False)


if __name__ == "__main__":
    main()
