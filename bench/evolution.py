"""Architecture search under asynchrony: evolution against random search and TPE on NAS-Bench-201.

    python -m bench.evolution [--seeds 50] [--seed0 0 ...] [--workers 1 16 64] [--budgets 100 200]
                              [--datasets cifar10 cifar100 imagenet] [--jobs 1]
                              [--methods evolution random tpe evolution-classic]
                              [--reuse RUNS_CSV ...]

Each run is a real ``search.loop.campaign.Campaign`` (the controller users run, with an
in-memory Optuna study) on a :class:`cluster.simulated.SimulatedExecutor` of
``--workers`` asynchronous workers whose trials look up the NAS-Bench-201 12-epoch
table (``bench/data/nb201_12epoch.csv``): the space is one ``cell`` parameter
(``{type = "cell"}``, 15,625 cells), the objective the ``{dataset}-val`` accuracy,
every trial 60 virtual seconds jittered per epoch (so trials finish out of order), and
the sampler is built exactly as ``sampler = "evolution" | "random" | "tpe"`` builds it
from the study seed. ``evolution-classic`` is the evolution sampler as it was before
issue 17 (population 20, all 20 random first, tournament of 5, one plain mutation,
repeats allowed: ``n_startup_trials=20, sample_size=5, candidates=1,
skip_duplicates=False``), seeded the same way. The controller's own time is not
charged to the virtual clock (``controller_time_scale = 0``), so the figures do not
depend on how loaded the machine is; seed ``s`` seeds the study, the sampler and the
executor. ``bench/NOTES.md`` has the 2026-12-01 figures and how the default was chosen.

Seeds are ``--seed0 .. --seed0 + --seeds - 1`` (the default was tuned on 0..49: give
fresh ones, e.g. ``--seed0 1000``, to check it); several ``--seed0`` values pool as many
sets of ``--seeds`` seeds (``--seed0 2000 3000 --seeds 30``: 60 seeds, a replication and
its original together). A sampler whose start scales with the
budget (``evolution``: ``takes_budget`` in the registry) runs one campaign per budget;
every other method runs one campaign of ``max(--budgets)`` trials per (dataset,
workers, method, seed) and the figure "at B evaluations" is read from its first B
trials by number, which are exactly the trials a campaign with ``n_trials = B`` runs
(the controller asks trial k at the same moment with the same finished trials whatever
the budget beyond k). ``--jobs`` runs that many campaigns at once, in processes.
``--reuse`` reads the runs of some methods from earlier ``evolution_runs.csv`` files
instead of running them again: a method found there is taken from there, and it must
cover every requested (dataset, workers, seed, budget). A campaign is deterministic for
its seed (the virtual clock, ``controller_time_scale = 0``), so a peer such as TPE,
whose figures a change to the evolution sampler cannot move, is run once.

Per run and budget: ``best_val`` (the best validation accuracy found, what the search
maximises), ``regret`` (table optimum of the validation column minus ``best_val``) and
``test`` (the ``{dataset}-test`` accuracy of the trial with the best validation
accuracy: the architecture the search would hand over; the first such trial when several
tie, as Optuna's ``best_trial`` picks). The summary reports, per (dataset, workers, budget),
each method's median, its share of runs at the table's validation optimum (where two cells
tie on validation but not on test, which one a method holds moves its test figure and
nothing the search sees can choose between them), and for the first method against each
peer the one-sided Mann-Whitney U p-values both ways ("stochastically greater", and
"smaller": a claim of "not worse" needs the second), ``scipy.stats.mannwhitneyu``, unpaired
(the runs of two methods are independent), for ``best_val`` and ``test``, with the
Vargha-Delaney effect size A12 in the CSV. Below the table, per peer and metric, the cells
better and worse at p < 0.05, and with Holm's correction over the run's cells and both
directions (a table of 18 cells holds about one p < 0.05 by chance).

Writes ``bench/results/evolution_runs.csv`` (one row per run and budget) and
``bench/results/evolution.csv`` (the summary).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import logging
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from scipy.stats import mannwhitneyu

from bench.simulate import NB201_CSV, RESULTS, TRIAL_SECONDS
from bench.simulate import bench_spec as table_spec
from cluster.simulated import SimulatedExecutor, TableModel
from search.loop.campaign import Campaign
from search.sampling.evolution import RegularizedEvolutionSampler
from search.sampling.samplers import make_sampler, sampler_info
from search.sampling.seeds import component_seed
from search.spec.campaign_spec import CampaignSpec
from search.store.folder import CampaignFolder

JITTER = 0.1
PARAM = "cell"
DATASETS = ("cifar10", "cifar100", "imagenet")
DATASET_LABEL = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "imagenet": "ImageNet16-120"}

__all__ = [
    "Run",
    "campaign",
    "compare",
    "holm",
    "load_runs",
    "reused",
    "runs_for",
    "seed_sets",
    "summarise",
    "verdicts",
    "main",
]

# A sampler name of the registry, or (for experiments) a factory (spec, study seed) -> sampler.
SamplerFactory = Callable[[CampaignSpec, int], optuna.samplers.BaseSampler]


def _classic(spec: CampaignSpec, study_seed: int) -> optuna.samplers.BaseSampler:
    """The evolution sampler's algorithm before issue 17, seeded as the registry seeds it."""
    from spaces.genomes import CellSpace

    return RegularizedEvolutionSampler(
        CellSpace(),
        prefix=PARAM,
        population_size=20,
        sample_size=5,
        seed=component_seed(study_seed, "sampler"),
        n_startup_trials=20,
        candidates=1,
        skip_duplicates=False,
    )


EXTRA_METHODS: dict[str, SamplerFactory] = {"evolution-classic": _classic}


def bench_spec(method: str, workers: int, budget: int, dataset: str, seed: int) -> CampaignSpec:
    """The NAS-Bench-201 cell as one architecture parameter, on the table's trivial trainer."""
    name = f"evo-{dataset}-{method}-{workers}-{seed}"
    return table_spec(name, {PARAM: {"type": "cell"}}, method, budget, seed=seed, dataset=dataset)


def campaign(
    method: str,
    workers: int,
    budget: int,
    dataset: str,
    seed: int,
    *,
    table: TableModel | None = None,
    sampler_factory: SamplerFactory | None = None,
) -> list[tuple[float, float]]:
    """One campaign; (validation accuracy, test accuracy) of each trial, by trial number.

    ``method`` is a registry sampler name or one of :data:`EXTRA_METHODS`;
    ``sampler_factory`` (if given) builds the sampler instead, from the spec and the study
    seed (``method`` then only labels it).
    """
    table = table or TableModel(NB201_CSV, trial_seconds=TRIAL_SECONDS, jitter=JITTER)
    sampler_factory = sampler_factory or EXTRA_METHODS.get(method)
    registry_name = method if sampler_factory is None else "evolution"
    spec = bench_spec(registry_name, workers, budget, dataset, seed)
    build = sampler_factory or (lambda s, seed_: make_sampler(method, s.space, seed_, budget=s.study.n_trials))
    sampler = build(spec, spec.study.seed)
    with tempfile.TemporaryDirectory() as tmp:
        folder = CampaignFolder(Path(tmp) / spec.study.name)
        folder.create(spec.text)
        study = optuna.create_study(
            study_name=spec.study.name, sampler=sampler, pruner=optuna.pruners.NopPruner(), direction="maximize"
        )
        executor = SimulatedExecutor(workers, table, seed=seed, controller_time_scale=0.0)
        Campaign(spec, folder, study, executor, clock=executor.clock).run()
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    out: list[tuple[float, float]] = []
    for t in trials:
        if t.state != optuna.trial.TrialState.COMPLETE:
            raise RuntimeError(f"trial {t.number} ended {t.state.name}; the table never fails a trial")
        out.append((float(t.value), float(t.user_attrs["metrics"]["test_accuracy"])))  # type: ignore[arg-type]
    if len(out) != budget:
        raise RuntimeError(f"{len(out)} trials ran, expected {budget}")
    return out


@dataclasses.dataclass(frozen=True)
class Run:
    dataset: str
    workers: int
    method: str
    seed: int
    budget: int
    best_val: float
    regret: float
    test: float


def runs_for(trials: Sequence[tuple[float, float]], budgets: Sequence[int], optimum: float, **key: Any) -> list[Run]:
    """One :class:`Run` per budget from a campaign's trials (by number)."""
    out = []
    for budget in budgets:
        first = list(trials[:budget])
        best = max(range(len(first)), key=lambda i: (first[i][0], -i))  # first trial reaching the best value
        out.append(
            Run(
                budget=budget,
                best_val=first[best][0],
                regret=round(optimum - first[best][0], 4),
                test=first[best][1],
                **key,
            )
        )
    return out


def summarise(runs: Sequence[Run], methods: Sequence[str]) -> list[dict[str, Any]]:
    """Per (dataset, workers, budget): each method's medians and share of runs at the table's
    validation optimum, and for ``methods[0]`` against each other method the one-sided rank-test
    p-values both ways and the effect size A12."""
    first, peers = methods[0], methods[1:]
    cells = sorted(
        {(r.dataset, r.workers, r.budget) for r in runs},
        key=lambda c: (DATASETS.index(c[0]) if c[0] in DATASETS else 99, c[1], c[2]),
    )
    rows = []
    for dataset, workers, budget in cells:
        sel = {
            m: [r for r in runs if (r.dataset, r.workers, r.budget, r.method) == (dataset, workers, budget, m)]
            for m in methods
        }
        row: dict[str, Any] = {
            "dataset": dataset,
            "workers": workers,
            "budget": budget,
            "seeds": min(len(v) for v in sel.values()),
        }
        for m in methods:
            row[f"{m}_val"] = round(float(np.median([r.best_val for r in sel[m]])), 3)
            row[f"{m}_regret"] = round(float(np.median([r.regret for r in sel[m]])), 3)
            row[f"{m}_test"] = round(float(np.median([r.test for r in sel[m]])), 3)
            row[f"{m}_at_optimum"] = round(float(np.mean([r.regret <= 0 for r in sel[m]])), 3)
        for peer in peers:
            for metric in ("best_val", "test"):
                a = [getattr(r, metric) for r in sel[first]]
                b = [getattr(r, metric) for r in sel[peer]]
                row.update(compare(a, b, f"{metric.split('_')[-1]}_vs_{peer}"))
        rows.append(row)
    return rows


def compare(a: Sequence[float], b: Sequence[float], label: str) -> dict[str, float]:
    """``a`` against ``b``: one-sided Mann-Whitney p-values that ``a`` is stochastically greater
    (``p_{label}``) and smaller (``p_worse_{label}``), and Vargha-Delaney A12 = P(a > b) + P(a = b) / 2
    (``a12_{label}``: 0.5 is no effect, 0.71 a large one)."""
    greater = mannwhitneyu(a, b, alternative="greater")
    less = float(mannwhitneyu(a, b, alternative="less").pvalue)
    return {
        f"p_{label}": float(f"{float(greater.pvalue):.2g}"),
        f"p_worse_{label}": float(f"{less:.2g}"),
        f"a12_{label}": round(float(greater.statistic) / (len(a) * len(b)), 3),
    }


def holm(pvalues: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """Which of ``pvalues`` Holm's step-down procedure rejects at family-wise level ``alpha``."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    rejected = [False] * len(pvalues)
    for rank, i in enumerate(order):
        if pvalues[i] > alpha / (len(pvalues) - rank):
            break
        rejected[i] = True
    return rejected


def verdicts(rows: Sequence[dict[str, Any]], first: str, peer: str, alpha: float = 0.05) -> str:
    """One line per metric: in how many cells ``first`` is better and worse than ``peer`` (one-sided
    p < ``alpha``, and with Holm's correction over the cells and both directions)."""
    lines = []
    for metric in ("val", "test"):
        better = [float(r[f"p_{metric}_vs_{peer}"]) for r in rows]
        worse = [float(r[f"p_worse_{metric}_vs_{peer}"]) for r in rows]
        kept = holm(better + worse, alpha)
        lines.append(
            f"{first} against {peer}, {metric}: better in {sum(p < alpha for p in better)}, worse in "
            f"{sum(p < alpha for p in worse)} of {len(rows)} cells (p < {alpha}); with Holm over the "
            f"{2 * len(rows)} tests: better in {sum(kept[: len(rows)])}, worse in {sum(kept[len(rows) :])}"
        )
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Job:
    """One campaign of the bench, and the budgets read from it."""

    method: str
    workers: int
    budget: int
    dataset: str
    seed: int
    read_at: tuple[int, ...]


def _jobs(method: str, workers: int, budgets: Sequence[int], dataset: str, seeds: Sequence[int]) -> list[Job]:
    """A campaign per budget for a sampler whose start scales with it, else one read at every budget."""
    per_budget = method not in EXTRA_METHODS and sampler_info(method).takes_budget
    if per_budget:
        return [Job(method, workers, b, dataset, s, (b,)) for s in seeds for b in budgets]
    return [Job(method, workers, max(budgets), dataset, s, tuple(budgets)) for s in seeds]


_TABLE: TableModel | None = None


def _run_job(job: Job) -> list[Run]:
    """Run one :class:`Job` (in a pool process: the table is loaded once per process)."""
    global _TABLE
    if _TABLE is None:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        logging.getLogger("search").setLevel(logging.WARNING)
        _TABLE = TableModel(NB201_CSV, trial_seconds=TRIAL_SECONDS, jitter=JITTER)
    trials = campaign(job.method, job.workers, job.budget, job.dataset, job.seed, table=_TABLE)
    return runs_for(
        trials,
        job.read_at,
        _TABLE.best(job.dataset, "val"),
        dataset=job.dataset,
        workers=job.workers,
        method=job.method,
        seed=job.seed,
    )


def load_runs(paths: Sequence[Path]) -> list[Run]:
    """The :class:`Run` rows of earlier ``--runs-out`` files."""
    types = {f.name: f.type for f in dataclasses.fields(Run)}
    casts: dict[str, Callable[[str], Any]] = {"str": str, "int": int, "float": float}
    out = []
    for path in paths:
        with path.open(newline="") as fh:
            out += [Run(**{k: casts[str(types[k])](v) for k, v in row.items()}) for row in csv.DictReader(fh)]
    return out


def reused(runs: Sequence[Run], method: str, cells: Sequence[tuple[str, int, int, int]]) -> list[Run]:
    """``method``'s runs among ``runs`` for the (dataset, workers, seed, budget) ``cells``; all or an error."""
    by_cell = {(r.dataset, r.workers, r.seed, r.budget): r for r in runs if r.method == method}
    missing = [c for c in cells if c not in by_cell]
    if missing:
        raise ValueError(
            f"--reuse has no {method} run for (dataset, workers, seed, budget) {missing[0]} (and {len(missing) - 1} more)"
        )
    return [by_cell[c] for c in cells]


def _write(path: Path, rows: Sequence[dict[str, Any]], *, append: bool = False, header_only: bool = False) -> None:
    """``rows`` as CSV (the :class:`Run` fields when writing only the header, or appending)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = list(rows[0]) if rows else [f.name for f in dataclasses.fields(Run)]
    with path.open("a" if append else "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        if not append:
            writer.writeheader()
        if not header_only:
            writer.writerows(rows)


def _load() -> str:
    """The 1/5/15-minute load averages (the figures do not depend on them: the clock is virtual)."""
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def print_summary(rows: Sequence[dict[str, Any]], methods: Sequence[str]) -> None:
    """A markdown table (per method: median best validation and test accuracy, runs at the
    validation optimum; per peer: p-values both ways), then the verdict counts per peer."""
    first, peers = methods[0], methods[1:]
    head = ["dataset", "workers", "evals"]
    head += [f"{m} val / test (at opt.)" for m in methods]
    head += [f"p val / test, {first} > {peer} / < {peer}" for peer in peers]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        cells = [DATASET_LABEL.get(row["dataset"], row["dataset"]), str(row["workers"]), str(row["budget"])]
        cells += [f"{row[f'{m}_val']:.2f} / {row[f'{m}_test']:.2f} ({row[f'{m}_at_optimum']:.0%})" for m in methods]
        cells += [
            f"{row[f'p_val_vs_{peer}']:.2g} / {row[f'p_test_vs_{peer}']:.2g}"
            f" / < {row[f'p_worse_val_vs_{peer}']:.2g} / {row[f'p_worse_test_vs_{peer}']:.2g}"
            for peer in peers
        ]
        print("| " + " | ".join(cells) + " |")
    for peer in peers:
        print(verdicts(rows, first, peer))


def seed_sets(starts: Sequence[int], size: int) -> list[int] | None:
    """The seeds of the sets ``start .. start + size - 1``, in order; None where two sets overlap."""
    seeds = [s for start in starts for s in range(start, start + size)]
    return seeds if len(set(seeds)) == len(seeds) else None


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(prog="python -m bench.evolution", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=50, help="how many seeds (default 50)")
    parser.add_argument(
        "--seed0",
        type=int,
        nargs="+",
        default=[0],
        help="the first seed of each seed set (default 0; the default was tuned on 0..49, so pass e.g. 1000 for "
        "fresh seeds; several, e.g. 2000 3000, pool --seeds seeds from each)",
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--jobs", type=int, default=1, help="campaigns run at once, in processes (default 1)")
    parser.add_argument("--budgets", type=int, nargs="+", default=[100, 200])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument(
        "--methods",
        nargs="+",
        default=["evolution", "random", "tpe", "evolution-classic"],
        help="registry sampler names or evolution-classic; the first is tested against each of the others "
        "(one alone: its runs only, to --reuse later)",
    )
    parser.add_argument(
        "--reuse",
        type=Path,
        nargs="+",
        default=[],
        help="earlier --runs-out files: a method found there is read from them, not run again",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "evolution.csv")
    parser.add_argument("--runs-out", type=Path, default=RESULTS / "evolution_runs.csv")
    args = parser.parse_args(argv)
    if not args.methods:
        parser.error("--methods needs at least one sampler")
    if args.seeds < 1 or min(args.seed0) < 0 or args.jobs < 1:
        parser.error("--seeds and --jobs must be >= 1, --seed0 >= 0")
    seeds = seed_sets(args.seed0, args.seeds)
    if seeds is None:
        parser.error(f"the seed sets --seed0 {' '.join(map(str, args.seed0))} of --seeds {args.seeds} overlap")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("search").setLevel(logging.WARNING)

    started = time.perf_counter()
    print(
        f"# bench.evolution  {time.strftime('%Y-%m-%d %H:%M')}  {platform.node()}  python {sys.version.split()[0]}"
        f"  optuna {optuna.__version__}  seeds {', '.join(f'{s}..{s + args.seeds - 1}' for s in args.seed0)}"
        f"  budgets {args.budgets}"
        f"  load {_load()}",
        flush=True,
    )
    budgets = sorted(set(args.budgets))
    earlier = load_runs(args.reuse)
    from_earlier = [m for m in args.methods if any(r.method == m for r in earlier)]
    cells = [(d, w, s, b) for d in args.datasets for w in args.workers for s in seeds for b in budgets]
    runs: list[Run] = [r for m in from_earlier for r in reused(earlier, m, cells)]
    if from_earlier:
        print(f"  reused from {', '.join(map(str, args.reuse))}: {', '.join(from_earlier)}", flush=True)
    jobs = [
        job
        for dataset in args.datasets
        for workers in args.workers
        for method in args.methods
        if method not in from_earlier
        for job in _jobs(method, workers, budgets, dataset, seeds)
    ]
    partial = args.runs_out.with_suffix(".partial.csv")  # every run as it lands: an interrupted bench keeps them
    _write(partial, [dataclasses.asdict(r) for r in runs], header_only=not runs)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for done, found in enumerate(pool.map(_run_job, jobs), 1):
            runs += found
            _write(partial, [dataclasses.asdict(r) for r in found], append=True)
            if done % max(1, len(jobs) // 20) == 0 or done == len(jobs):
                print(
                    f"  {done}/{len(jobs)} campaigns  {time.perf_counter() - started:6.0f} s  load {_load()}",
                    flush=True,
                )
    rows = summarise(runs, args.methods)
    print()
    print_summary(rows, args.methods)
    _write(args.runs_out, [dataclasses.asdict(r) for r in runs])
    _write(args.out, rows)
    print(f"\nwrote {args.out} and {args.runs_out} in {time.perf_counter() - started:.0f} s")
    return rows


if __name__ == "__main__":
    main()
