"""Light commands: wall time of ``hypersweep check``, ``status`` and ``resume`` of a finished campaign.

Each command runs in a fresh interpreter (``python -m search ...``), as a user runs it, ``--reps`` times;
the figure is the median. Peers in the same run: a bare interpreter, ``import optuna``, ``import
distributed`` and ``import torch``, so that the ratios say what a command costs beyond its imports on a
machine whose load changes from minute to minute. The load average is printed with every table.

The finished campaign is made by the real controller on the simulated executor (no cluster, no trainer
runs), with the default journal storage::

    python -m bench.light [--reps 3] [--trials 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.simulate import EPOCHS, NB201_CSV, TRAINER, TRIAL_SECONDS, nb201_space
from cluster.simulated import SimulatedExecutor, TableModel
from search.loop.campaign import Campaign
from search.session.runner import load_study
from search.spec.campaign_spec import load_spec
from search.spec.toml_text import to_toml
from search.store.folder import CampaignFolder

__all__ = ["finished_campaign", "time_command", "main"]

ROOT = Path(__file__).resolve().parents[1]


def finished_campaign(
    root: Path, n_trials: int, sampler: str = "random", seed: int = 0, workers: int = 16, trainer: str = TRAINER
) -> Path:
    """A campaign folder whose ``n_trials`` trials all finished, run by the real ``Campaign`` on simulated
    workers (NAS-Bench-201 table, 60 s trials of virtual time) with the default journal storage. ``trainer`` is
    never imported (the simulated workers run nothing)."""
    name = f"light-{sampler}-{n_trials}"
    data = {
        "study": {
            "name": name,
            "direction": "maximize",
            "metric": "accuracy",
            "sampler": sampler,
            "seed": seed,
            "n_trials": n_trials,
        },
        "trainer": {"entry": trainer, "dataset": "cifar10", "epochs": EPOCHS, "checkpoint_every": 1},
        "space": nb201_space(),
    }
    source = root / f"{name}.toml"
    source.write_text(to_toml(data))
    spec = load_spec(source, check_trainer=False)
    folder = CampaignFolder(root / name)
    folder.root.mkdir(parents=True)
    folder.create(spec.text)
    study = load_study(spec, folder, create=True, writer=True)
    executor = SimulatedExecutor(workers, TableModel(NB201_CSV, trial_seconds=TRIAL_SECONDS, jitter=0.1), seed=seed)
    Campaign(spec, folder, study, executor, clock=executor.clock).run()
    return folder.root


def time_command(argv: Sequence[str], reps: int) -> list[float]:
    """Wall seconds of ``argv`` run ``reps`` times from the repository root; a failure raises."""
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        done = subprocess.run(list(argv), cwd=ROOT, capture_output=True, text=True, timeout=600)
        times.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return times


def _commands(folder: Path) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "python -c pass": [py, "-c", "pass"],
        "import optuna": [py, "-c", "import optuna"],
        "import distributed": [py, "-c", "import distributed"],
        "import torch": [py, "-c", "import torch"],
        "check examples/digits.toml": [py, "-m", "search", "check", "examples/digits.toml"],
        "status (finished)": [py, "-m", "search", "status", str(folder)],
        "resume (finished)": [py, "-m", "search", "resume", str(folder), "--no-progress"],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.light", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--trials", type=int, default=200, help="trials of the finished campaign")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = finished_campaign(Path(tmp), args.trials)
        rows = []
        for label, command in _commands(folder).items():
            load = os.getloadavg()[0]
            times = time_command(command, args.reps)
            rows.append((label, statistics.median(times), min(times), max(times), load))
    print(
        f"{'command':32} {'median s':>9} {'min s':>7} {'max s':>7} {'load':>5}   (reps={args.reps}, "
        f"{os.cpu_count()} cores, {args.trials} trials)"
    )
    for label, median, low, high, load in rows:
        print(f"{label:32} {median:9.2f} {low:7.2f} {high:7.2f} {load:5.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
