"""Validation ties in NAS-Bench-201, and what they do to a search's test accuracy.

    python -m bench.nb201_ties [--dataset cifar100] [--top 5] [--workers 1] [--budget 200]
                               [--seeds 30] [--seed0 2000 3000] [--methods evolution tpe] [--jobs 2]

``bench.evolution`` reports the test accuracy of the trial with the best validation
accuracy, the first one when several tie. Where two cells of the table share the best
validation accuracy but not their test accuracy, which one a run holds moves its test
figure, and nothing the search sees can tell them apart. This prints:

1. the ``--top`` cells by ``{dataset}-val`` (index, accuracies, a rough cost: 9 per 3x3
   convolution, 1 per 1x1);
2. whether the smaller of two cells that tie on validation tends to test better, over the
   whole table and over its top 500 and top 50 cells by validation (a tie rule that
   looks at anything else than validation needs such evidence, or it is tuned on test);
3. for each method, over the campaigns of ``bench.evolution`` (same spec, same seeds,
   deterministic on the virtual clock): which (validation, test) pair the runs hand
   over, and in how many runs the cells tied at the validation optimum were all evaluated.
"""

from __future__ import annotations

import argparse
import collections
import logging
import re
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import optuna
import pandas as pd

from bench.evolution import DATASETS, campaign, seed_sets
from bench.simulate import NB201_CSV

COST = {"none": 0, "skip_connect": 0, "avg_pool_3x3": 0, "nor_conv_1x1": 1, "nor_conv_3x3": 9}

__all__ = ["table", "tied_optimum", "size_at_ties", "held", "main"]


def table() -> pd.DataFrame:
    """The NAS-Bench-201 12-epoch table with a ``cost`` column."""
    frame = pd.read_csv(NB201_CSV)
    frame["cost"] = [sum(COST[op] for op in re.findall(r"\|([a-z_0-9]+)~", cell)) for cell in frame.cellstr]
    return frame


def tied_optimum(frame: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """The cells at the table's best ``{dataset}-val``."""
    val = frame[f"{dataset}-val"]
    return frame[val == val.max()]


def size_at_ties(frame: pd.DataFrame, dataset: str, top: int | None = None) -> tuple[int, int, int]:
    """Over pairs of cells with equal validation and unequal cost (among the ``top`` by
    validation): how often the cheaper one tests higher, lower, equal."""
    ranked = frame.sort_values(f"{dataset}-val", ascending=False)
    if top is not None:
        ranked = ranked.head(top)
    higher = lower = equal = 0
    for _, group in ranked.groupby(f"{dataset}-val"):
        rows = list(group[["cost", f"{dataset}-test"]].itertuples(index=False))
        for i, (cost_a, test_a) in enumerate(rows):
            for cost_b, test_b in rows[i + 1 :]:
                if cost_a == cost_b:
                    continue
                small, large = (test_a, test_b) if cost_a < cost_b else (test_b, test_a)
                higher += small > large
                lower += small < large
                equal += small == large
    return higher, lower, equal


def _one(job: tuple[str, int, int, str, int]) -> tuple[str, tuple[float, float], set[tuple[float, float]]]:
    method, workers, budget, dataset, seed = job
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("search").setLevel(logging.WARNING)
    trials = campaign(method, workers, budget, dataset, seed)
    best = max(range(len(trials)), key=lambda i: (trials[i][0], -i))  # as bench.evolution reads it
    return method, trials[best], set(trials)


def held(
    methods: Sequence[str], workers: int, budget: int, dataset: str, seeds: Sequence[int], jobs: int = 1
) -> dict[str, dict[str, Any]]:
    """Per method: a Counter of the (validation, test) pairs handed over, and the runs that
    evaluated every cell tied at the validation optimum."""
    tied = {
        (float(v), float(t)) for v, t in tied_optimum(table(), dataset)[[f"{dataset}-val", f"{dataset}-test"]].values
    }
    work = [(m, workers, budget, dataset, s) for m in methods for s in seeds]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        done = list(pool.map(_one, work))
    out: dict[str, dict[str, Any]] = {}
    for method in methods:
        mine = [(best, seen) for m, best, seen in done if m == method]
        out[method] = {
            "held": collections.Counter(best for best, _ in mine),
            "all_tied_evaluated": sum(tied <= seen for _, seen in mine),
            "runs": len(mine),
        }
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.nb201_ties", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="cifar100", choices=DATASETS)
    parser.add_argument("--top", type=int, default=5, help="cells listed by validation accuracy (default 5)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--budget", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=30, help="seeds per set (default 30)")
    parser.add_argument("--seed0", type=int, nargs="+", default=[2000, 3000], help="first seed of each set")
    parser.add_argument("--methods", nargs="*", default=["evolution", "tpe"], help="none: the table only")
    parser.add_argument("--jobs", type=int, default=1, help="campaigns run at once, in processes")
    args = parser.parse_args(argv)
    if min(args.top, args.workers, args.budget, args.seeds, args.jobs) < 1 or min(args.seed0) < 0:
        parser.error("--top, --workers, --budget, --seeds and --jobs must be >= 1, --seed0 >= 0")
    seeds = seed_sets(args.seed0, args.seeds)
    if seeds is None:
        parser.error("the seed sets overlap")
    frame = table()
    ds = args.dataset
    top = frame.sort_values(f"{ds}-val", ascending=False).head(args.top)
    print(top[["index", f"{ds}-val", f"{ds}-test", "cost", "cellstr"]].to_string(index=False))
    tied = tied_optimum(frame, ds)
    print(
        f"{len(tied)} cell(s) at the validation optimum {tied[f'{ds}-val'].iloc[0]:g}; a search that always hands one"
        f" over, ties broken at random, has mean test accuracy {tied[f'{ds}-test'].mean():.2f}"
    )
    for limit in (None, 500, 50):
        higher, lower, equal = size_at_ties(frame, ds, limit)
        scope = "all cells" if limit is None else f"top {limit}"
        print(f"ties on validation, {scope}: the cheaper cell tests higher {higher}, lower {lower}, equal {equal}")
    if not args.methods:
        return
    print(f"\n{ds}, {args.workers} worker(s), {args.budget} evaluations, {len(seeds)} seeds")
    for method, found in held(args.methods, args.workers, args.budget, ds, seeds, args.jobs).items():
        pairs = ", ".join(f"{v:g} / {t:g}: {n}" for (v, t), n in found["held"].most_common(6))
        print(
            f"  {method}: handed over (val / test: runs) {pairs}; "
            f"every tied optimum cell evaluated in {found['all_tied_evaluated']} of {found['runs']}"
        )


if __name__ == "__main__":
    main()
