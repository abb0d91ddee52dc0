"""The critical batch size over training, measured directly on the digits (a branching study on a local Dask cluster).

A reference run (SGD with momentum, constant rate, batch ``--reference-batch``) checkpoints at ``--points``;
from each, branches at ``--batch-sizes`` x ``--lr-factors`` (around the reference rate scaled by ``--lr-rule``)
train ``--branch-epochs`` more epochs; the critical batch size per point, the noise scale there, the schedule,
and the scheduled run against the reference: steps and examples to ``--target`` validation accuracy.

    python -m bench.branching --out runs/branching [--workers 2] [--seed 3]   # the defaults: docs/howto/scaling.md
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from search.scaling.branch_run import dask_submit, run_branching, write_branching
from search.scaling.branching import BranchingSpec, at_grid_edge, best_per_batch
from trainers.api import TrialConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/branching"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--points", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 16, 32, 64, 128, 256])
    ap.add_argument("--lr-factors", type=float, nargs="+", default=[0.125, 0.25, 0.5, 1.0, 2.0])
    ap.add_argument("--lr-rule", default="sqrt")
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--branch-epochs", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--epsilon", type=float, default=0.05)
    ap.add_argument("--target", type=float, default=0.97)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--widen", type=int, default=0, help="rounds of one rate beyond a tuned rate at a grid's end")
    args = ap.parse_args()
    spec = BranchingSpec(
        points=tuple(args.points),
        batch_sizes=tuple(args.batch_sizes),
        reference_batch=min(args.batch_sizes),
        epochs=args.epochs,
        branch_epochs=args.branch_epochs,
        lr_factors=tuple(args.lr_factors),
        lr_rule=args.lr_rule,
        epsilon=args.epsilon,
        widen=args.widen,
    )
    params = {"model": "mlp", "hidden": 128, "optimizer": "sgd", "momentum": 0.9, "schedule": "constant"}
    base = TrialConfig(
        study="branching",
        number=0,
        params={**params, "batch_size": spec.reference_batch, "lr": args.lr},
        seed=args.seed,
        epochs=spec.epochs,
        dataset="digits",
        device="cpu",
        options={"noise_scale_every": 1},
    )
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as c,
    ):
        result = run_branching(
            spec, base, args.out, dask_submit(c, "trainers.classifier:fit"), target=("val_accuracy", args.target, "max")
        )
    write_branching(result, spec, args.out)
    from search.scaling.branch_plot import plot_critical

    plot_critical(result, args.out / "critical.png")
    for p in spec.points:
        best = best_per_batch(result.branches, p)
        losses = "  ".join(f"B={b}: {best[b].val_loss:.4f}" for b in sorted(best))
        edge = at_grid_edge(result.branches, p)
        print(f"epoch {p}: critical batch {result.critical[p]}, b_simple {result.noise_scale[p]:.4g}; {losses}")
        print(f"  tuned rate at an end of the grid: B={edge}")
    print("schedule (from epoch, batch, lr):", [(e, b, round(lr, 5)) for e, b, lr in result.schedule])
    runs = (("fixed", result.fixed), ("scheduled", result.scheduled), ("fixed at the last batch", result.fixed_last))
    for name, hit in runs:
        shown = "not reached" if math.isnan(hit["steps"]) else f"{hit['steps']:.0f} steps, {hit['examples']:.0f} ex"
        end = (
            f"{hit['final_steps']:.0f} steps, val_loss {hit['final_val_loss']:.4f}, acc {hit['final_val_accuracy']:.4f}"
        )
        print(f"{name}: to the target {shown}; at the end ({hit['final_examples']:.0f} ex) {end}")
    print(json.dumps({"out": str(args.out)}))


if __name__ == "__main__":
    main()
