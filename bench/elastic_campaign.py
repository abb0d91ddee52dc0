"""ASHA with elastic widths against ASHA at a fixed width, run by the real Campaign on the simulated cluster (issue 51,
point 6a).

    python -m bench.elastic_campaign [--seeds 5] [--seed0 0] [--slots 4 16 64] [--trials-per-slot 4]

Each run is a real :class:`search.loop.campaign.Campaign` (random sampler, ASHA pruner: rungs at 1, 3 and 9 of 27
epochs) on a :class:`cluster.simulated.SimulatedExecutor` of one worker with ``--slots`` slots (the controller's own
time not charged: ``controller_time_scale = 0``), ``max(32, trials-per-slot x slots)`` trials. The settings:

- ``fixed-1``: every trial at width 1; ``fixed-W``: every trial at the widest width W (8, or the slots where fewer);
- ``elastic``: ``[elastic] widths = [1, 2, 4, 8]`` (those within the slots), ``grow = "goodput"``, ``reserve = 1``,
  ``batch = "fixed"``: a trial starts at width 1 and grows into slots left idle (none while trials wait to start),
  by the goodput the campaign predicts from the step times the trial reported; a trial past ASHA's last rung may
  take a slot that comes free before the waiting trials, where its result comes sooner by more than the delay
  that causes (:func:`search.elastic.allocate.hurry`).

The trial model (:class:`ElasticCurves`): a trial's learning curve is ``a - (a - 0.1) exp(-epoch / c)`` plus noise per
epoch, ``a`` a smooth function of its two parameters, ``c`` and the noise drawn from ``(seed, trial number)``: the
same for a trial at any width and in any segment (the global batch is fixed, so statistical efficiency is 1 and the
optimisation path does not change). An epoch takes ``EXAMPLES / BATCH`` steps of :class:`cluster.goodput.StepModel`
``STEP`` (compute per replica's share plus a ring all-reduce's constant and retrogression) times a lognormal jitter;
each run pays ``RESTART`` seconds on its first epoch (start, rendezvous, checkpoint loaded), so every resize costs.
A run resumes at the epoch its checkpoint is at (the simulator's ``resume_epoch``).

Per seed and slot count: the value the worst setting ends with (``target``, the best all reach), each setting's
simulated time until its campaign's best (a completed trial's value) first reaches it, and each one's final best.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from cluster.goodput import StepModel
from cluster.sim_models import TrialPlan
from cluster.simulated import SimulatedExecutor
from search.loop.campaign import Campaign, Snapshot
from search.session.runner import load_study
from search.spec.campaign_spec import CampaignSpec, parse_spec
from search.store.folder import CampaignFolder
from search.store.records import Attr

__all__ = ["ElasticCurves", "spec_for", "run", "compare", "main", "STEP", "WIDTHS"]

STEP = StepModel(alpha_c=0.005, beta_c=0.001, alpha_n=0.01, beta_n=0.002)  # seconds per step (bench/elastic.py's)
BATCH = 128  # the global batch (fixed)
EXAMPLES = 10_000  # per epoch
RESTART = 5.0  # seconds each run pays before its first epoch
EPOCHS, ETA = 27, 3  # ASHA rungs at 1, 3, 9 epochs
WIDTHS = (1, 2, 4, 8)
JITTER = 0.05


class ElasticCurves:
    """A :class:`cluster.sim_models.TrialModel` whose trials resume from their checkpoint at any width (see the module)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def curve(self, number: int, params: Mapping[str, Any]) -> list[float]:
        """The trial's value after each epoch, 1..EPOCHS (the same in every run of it)."""
        x = np.array([float(params["x1"]), float(params["x2"])])
        a = 0.1 + 0.85 * math.exp(-float(((x - 0.3) ** 2).sum()) / 0.1)
        rng = np.random.default_rng([self.seed, number])
        c, noise = float(rng.uniform(2.0, 8.0)), rng.normal(0.0, 0.003, EPOCHS)
        return [a - (a - 0.1) * math.exp(-e / c) + float(noise[e - 1]) for e in range(1, EPOCHS + 1)]

    def plan(self, config: Mapping[str, Any], rng: np.random.Generator) -> TrialPlan:
        start, end, width = int(config["resume_epoch"]), int(config["epochs"]), int(config["data_parallel"])
        values = self.curve(int(config["number"]), config["params"])
        steps = EXAMPLES / BATCH
        epoch = steps * STEP.step_seconds(width, BATCH / width)
        seconds, metrics = [], []
        for e in range(start + 1, end + 1):
            seconds.append(epoch * float(rng.lognormal(0.0, JITTER)) + (RESTART if e == start + 1 else 0.0))
            metrics.append({"value": values[e - 1], "epoch": float(e), "steps": e * steps, "examples": e * EXAMPLES})
        return TrialPlan(tuple(seconds), tuple(metrics))


def spec_for(setting: str, slots: int, trials: int, seed: int) -> CampaignSpec:
    """``fixed-W`` or ``elastic`` on ``slots`` slots."""
    widths = [w for w in WIDTHS if w <= slots]
    data: dict[str, Any] = {
        "study": {
            "name": f"elastic-{setting}-{slots}-{seed}",
            "direction": "maximize",
            "metric": "value",
            "sampler": "random",
            "seed": seed,
            "n_trials": trials,
            "pruner": "asha",
        },
        "pruner": {"min_resource": 1, "reduction_factor": ETA},
        "trainer": {"entry": "bench.trivial:fit", "epochs": EPOCHS},
        "space": {
            "x1": {"type": "float", "low": 0.0, "high": 1.0},
            "x2": {"type": "float", "low": 0.0, "high": 1.0},
            "batch_size": BATCH,
        },
    }
    if setting == "elastic":
        data["elastic"] = {"widths": widths, "grow": "goodput", "reserve": 1}
    else:
        data["trainer"]["data_parallel"] = int(setting.removeprefix("fixed-"))
    return parse_spec(data, source=f"<bench elastic {setting}>", text=json.dumps(data), check_trainer=False)


@dataclasses.dataclass(frozen=True)
class Ran:
    """One campaign: its best over (virtual) time, its end, and how many segments were resized."""

    best: list[tuple[float, float]]  # (elapsed, best so far) at each change
    end: float
    resized: int

    def time_to(self, target: float) -> float:
        return next((t for t, b in self.best if b >= target - 1e-12), math.inf)

    @property
    def final(self) -> float:
        return self.best[-1][1] if self.best else -math.inf


def run(spec: CampaignSpec, slots: int, seed: int) -> Ran:
    best: list[tuple[float, float]] = []

    def seen(s: Snapshot) -> None:
        if s.best is not None and (not best or s.best > best[-1][1]):
            best.append((s.elapsed, s.best))

    with tempfile.TemporaryDirectory() as tmp:
        folder = CampaignFolder(Path(tmp) / spec.study.name)
        folder.create(spec.text)
        study = load_study(spec, folder, create=True)
        executor = SimulatedExecutor(1, ElasticCurves(seed), slots_per_worker=slots, seed=seed, controller_time_scale=0)
        Campaign(spec, folder, study, executor, clock=executor.clock, on_progress=seen).run()
        trials = study.get_trials(deepcopy=False)
    resized = sum(1 for t in trials for r in t.user_attrs.get(Attr.SEGMENTS, []) if r["transition"] == "resize")
    return Ran(best, executor.clock(), resized)


def settings(slots: int) -> list[str]:
    return ["fixed-1", f"fixed-{max(w for w in WIDTHS if w <= slots)}", "elastic"]


def compare(slots: int, seed: int, trials_per_slot: int = 4) -> dict[str, Any]:
    """Each setting's time to the common target and final best for one seed (and the elastic speedup)."""
    trials = max(32, trials_per_slot * slots)
    runs = {name: run(spec_for(name, slots, trials, seed), slots, seed) for name in settings(slots)}
    target = min(r.final for r in runs.values())
    row: dict[str, Any] = {"slots": slots, "seed": seed, "target": round(target, 4)}
    for name, ran in runs.items():
        row[name] = {"time": round(ran.time_to(target), 1), "best": round(ran.final, 4), "end": round(ran.end, 1)}
    row["elastic"]["resized"] = runs["elastic"].resized
    fixed = min(row[n]["time"] for n in row if n.startswith("fixed-"))
    row["speedup"] = round(fixed / row["elastic"]["time"], 3)
    return row


def summarise(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for slots in sorted({r["slots"] for r in rows}):
        sel = [r for r in rows if r["slots"] == slots]
        entry: dict[str, Any] = {"slots": slots, "seeds": len(sel)}
        for name in settings(slots):
            entry[f"{name}_time_median"] = statistics.median(r[name]["time"] for r in sel)
            entry[f"{name}_best_median"] = round(statistics.median(r[name]["best"] for r in sel), 4)
        speedups = [r["speedup"] for r in sel]
        entry.update(
            speedup_median=round(statistics.median(speedups), 3), speedup_min=min(speedups), speedup_max=max(speedups)
        )
        out.append(entry)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.elastic_campaign", description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--seed0", type=int, default=0)
    p.add_argument("--slots", type=int, nargs="+", default=[4, 16, 64])
    p.add_argument("--trials-per-slot", type=int, default=4)
    args = p.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = []
    for slots in args.slots:
        for seed in range(args.seed0, args.seed0 + args.seeds):
            rows.append(compare(slots, seed, args.trials_per_slot))
            print(json.dumps(rows[-1]), flush=True)
    for entry in summarise(rows):
        print(json.dumps(entry))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
