"""Regularized evolution vs random search over the NAS-Bench-201 cell space.

    python -m bench.evolution [--seeds 20] [--budget 300] [--population 20] [--sample-size 5]

No training: the fitness of a cell is a fixed synthetic landscape (seeded once,
independent of the search seeds): an additive score per (edge, op) plus a pairwise
interaction term for every pair of edges,

    f(cell) = sum_e U[e, op_e] + sum_{e < e'} P[e, e', op_e, op_e'],
    U ~ N(0, 1),  P ~ N(0, 0.5**2)

so good ops are good on their own (mutation can climb) but the best choice on one edge
depends on the others (the landscape has local optima). The 15,625 values are computed
exhaustively, giving the global optimum and the 99th-percentile threshold.

Both searches run through Optuna with the same budget per seed:
``RegularizedEvolutionSampler`` (population 20, tournament 5 by default) and
``RandomSampler`` over the same six edge parameters. The table reports the mean ± std
of the best fitness found, how many seeds found the optimum, and for the 99th and 99.9th
percentiles how many seeds reached them and the median number of evaluations needed
(over the seeds that did). It is written to
``bench/results/evolution.csv``.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import optuna

from search.sampling.evolution import RegularizedEvolutionSampler
from spaces.genomes import CELL_EDGES, CELL_OPS, CellGenome, CellSpace

PREFIX = "arch"
LANDSCAPE_SEED = 2019
QUANTILES = (0.99, 0.999)
OUT = Path(__file__).resolve().parent / "results" / "evolution.csv"


def landscape(seed: int = LANDSCAPE_SEED) -> np.ndarray:
    """Fitness of every cell, indexed by ``CellSpace().index``."""
    rng = np.random.default_rng(seed)
    n_edges, n_ops = len(CELL_EDGES), len(CELL_OPS)
    unary = rng.normal(0.0, 1.0, size=(n_edges, n_ops))
    pair = rng.normal(0.0, 0.5, size=(n_edges, n_edges, n_ops, n_ops))
    ops = np.array(list(itertools.product(range(n_ops), repeat=n_edges)))  # index order
    fitness = unary[np.arange(n_edges), ops].sum(axis=1)
    for a, b in itertools.combinations(range(n_edges), 2):
        fitness += pair[a, b, ops[:, a], ops[:, b]]
    return fitness


def run_search(
    sampler: optuna.samplers.BaseSampler,
    suggest: Callable[[optuna.Trial], CellGenome],
    table: np.ndarray,
    budget: int,
) -> np.ndarray:
    """Fitness of each evaluation, in order."""
    space = CellSpace()

    def objective(trial: optuna.Trial) -> float:
        return float(table[space.index(suggest(trial))])

    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(objective, n_trials=budget)
    return np.array([t.value for t in study.trials], dtype=float)


Searcher = tuple[optuna.samplers.BaseSampler, Callable[[optuna.Trial], CellGenome]]


def evolution(seed: int, population: int, sample_size: int) -> Searcher:
    sampler = RegularizedEvolutionSampler(
        CellSpace(), prefix=PREFIX, population_size=population, sample_size=sample_size, seed=seed
    )
    return sampler, sampler.suggest  # type: ignore[return-value]


def random_search(seed: int) -> Searcher:
    space = CellSpace()
    return optuna.samplers.RandomSampler(seed=seed), lambda trial: space.suggest(trial, PREFIX)


def _tag(quantile: float) -> str:
    return f"q{quantile * 100:g}".replace(".", "_")


def summarise(
    name: str, runs: Sequence[np.ndarray], thresholds: dict[float, float], optimum: float
) -> dict[str, object]:
    best = np.array([r.max() for r in runs])
    row: dict[str, object] = {
        "method": name,
        "seeds": len(runs),
        "budget": len(runs[0]),
        "best_mean": round(float(best.mean()), 4),
        "best_std": round(float(best.std(ddof=1)), 4) if len(runs) > 1 else 0.0,
        "found_optimum": int(np.isclose(best, optimum).sum()),
    }
    for quantile, threshold in thresholds.items():
        hits = [int(np.argmax(r >= threshold)) + 1 for r in runs if (r >= threshold).any()]
        row[f"reached_{_tag(quantile)}"] = len(hits)
        row[f"evals_to_{_tag(quantile)}_median"] = float(np.median(hits)) if hits else float("nan")
    return row


def main(argv: Sequence[str] | None = None) -> list[dict[str, object]]:
    parser = argparse.ArgumentParser(prog="python -m bench.evolution", description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--budget", type=int, default=300)
    parser.add_argument("--population", type=int, default=20)
    parser.add_argument("--sample-size", type=int, default=5)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    started = time.perf_counter()
    table = landscape()
    optimum = float(table.max())
    thresholds = {q: float(np.quantile(table, q)) for q in QUANTILES}
    runs: dict[str, list[np.ndarray]] = {"regularized_evolution": [], "random": []}
    for seed in range(args.seeds):
        runs["regularized_evolution"].append(
            run_search(*evolution(seed, args.population, args.sample_size), table, args.budget)
        )
        runs["random"].append(run_search(*random_search(seed), table, args.budget))
    rows = [summarise(name, r, thresholds, optimum) for name, r in runs.items()]
    for row in rows:
        row["optimum"] = round(optimum, 4)
        row.update({f"{_tag(q)}_threshold": round(t, 4) for q, t in thresholds.items()})

    print(
        f"cell space: {table.size} cells, optimum {optimum:.4f}, median {np.median(table):.4f}, "
        + ", ".join(f"{_tag(q)} {t:.4f}" for q, t in thresholds.items())
        + f"; {args.seeds} seeds x {args.budget} evaluations"
    )
    header = f"{'method':<23}{'best (mean ± std)':>19}{'optimum':>9}"
    for q in thresholds:
        header += f"{'reached ' + _tag(q):>15}{'evals to ' + _tag(q):>16}"
    print(header)
    for row in rows:
        best = f"{row['best_mean']:.3f} ± {row['best_std']:.3f}"
        line = f"{row['method']:<23}{best:>19}{str(row['found_optimum']) + '/' + str(row['seeds']):>9}"
        for q in thresholds:
            reached = f"{row[f'reached_{_tag(q)}']}/{row['seeds']}"
            line += f"{reached:>15}{row[f'evals_to_{_tag(q)}_median']:>16}"
        print(line)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {args.out} in {time.perf_counter() - started:.1f} s")
    return rows


if __name__ == "__main__":
    main()
