"""The real controller against a simulated cluster: utilization, controller rate, time-to-best.

    python -m bench.simulate [--quick] [--workers 16 64 256 1024] [--samplers random tpe] [--reps 3]
                             [--storages sqlite journal] [--storage-workers 256 1024] [--no-curve]
                             [--storage-samplers random tpe] [--join-seconds 60] [--sampler-process]

Each run is a real ``search.loop.campaign.Campaign`` with a real Optuna study, on a
:class:`cluster.simulated.SimulatedExecutor` whose trials take 60 virtual seconds
(12 epochs of 5 s, NAS-Bench-201 accuracies). The controller's real time is
charged to the virtual clock, so a slow controller shows up as idle workers. The command
declares that it owns its heap, as the ``hypersweep`` command does, so the loop freezes what
survives (``search/store/heap.py``).

Storages (the ``storage`` column): ``memory`` is an in-memory Optuna study (not durable;
the default of the sampler x workers rows), ``journal`` the campaign's default storage
(``[study] storage = ""``: the group-commit journal file in the campaign folder) and
``sqlite`` the campaign's SQLite file (``[study] storage = "sqlite"``, WAL,
``synchronous=NORMAL``). The durable storages run on the ``--storage-workers`` cluster sizes
with the ``--storage-samplers`` (default random).

With ``--reps N`` every row is run N times (same seed; what varies is the real
controller time charged to the virtual clock) and ``simulate.csv`` holds the median of
each column; ``simulate-raw.csv`` every repetition.

Columns of ``bench/results/simulate.csv``:
- ``util``: busy slot-seconds / (slots x window), window = first trial start (or, with
  ``--join-seconds``, the moment the last worker joined) to the last trial start (while
  the budget lasts; the drain at the end is not counted);
  ``util_all``: the same up to the last trial end;
  ``util_end``: the same over the last trial length (60 virtual s) before the last start, the
  steady state once the echo of the first wave (all slots filled at once, so all ending
  together one trial length later) has spread out.
- ``rss_mb``: the bench process's resident memory at the end of the run, with the study,
  the controller's state and the simulator still held (``VmRSS``).
- ``ctrl_ms_per_trial``: real controller seconds per trial (everything the campaign
  does between two ``events()`` calls: ask, config, reports, tell).
- ``ctrl_trials_per_s``: 1000 / ctrl_ms_per_trial, the controller's sustainable rate;
  ``needed_trials_per_s`` = workers / 60 s is what the cluster asks of it.
- ``sampling``: ``inline`` (the sampler asks on the loop; its time is the controller's) or ``process``
  (``--sampler-process``: the child process a real cluster samples ``tpe`` and ``gp`` in, modelled with
  the child's own code in this process, its time on a core of its own: ``search.sampling.virtual_child``);
  ``sampler_ms_per_trial``: that core's real seconds per trial (asks and the tells it records).
- ``best``, ``regret`` (table optimum - best, accuracy points), ``t_best`` (virtual s
  at which the final best was first found), ``t_regret1`` (virtual s until regret <= 1).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import gc
import json
import logging
import math
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna

from bench.overhead import resident_mb
from cluster.simulated import NB201_OPS, CurveModel, SimulatedExecutor, TableModel, TrialModel
from search.loop.campaign import Campaign
from search.sampling.pruning import make_pruner
from search.sampling.samplers import make_sampler
from search.session.runner import load_study
from search.spec.campaign_spec import CampaignSpec, parse_spec
from search.store.folder import CampaignFolder
from search.store.heap import freeze_after_loads
from search.store.records import TrialRecord

HERE = Path(__file__).resolve().parent
NB201_CSV = HERE / "data" / "nb201_12epoch.csv"
RESULTS = HERE / "results"
TRAINER = "bench.trivial:fit"
TRIAL_SECONDS = 60.0
EPOCHS = 12

__all__ = [
    "nb201_space",
    "curve_space",
    "bench_spec",
    "open_study",
    "storage_setting",
    "simulate",
    "SimResult",
    "median_rows",
    "main",
]


# --- specs and studies -------------------------------------------------------------------------


def nb201_space() -> dict[str, Any]:
    """Six categorical edge ops e0..e5: the NAS-Bench-201 cell space (15,625 cells)."""
    return {f"e{i}": {"type": "categorical", "choices": list(NB201_OPS)} for i in range(6)}


def curve_space() -> dict[str, Any]:
    return {
        "lr": {"type": "float", "low": 1e-5, "high": 1.0, "log": True},
        "weight_decay": {"type": "float", "low": 1e-6, "high": 1e-1, "log": True},
        "width": {"type": "int", "low": 16, "high": 512, "log": True},
        "act": {"type": "categorical", "choices": ["relu", "gelu", "tanh"]},
    }


def bench_spec(
    name: str,
    space: Mapping[str, Any],
    sampler: str,
    n_trials: int,
    *,
    seed: int = 0,
    epochs: int = EPOCHS,
    metric: str = "accuracy",
    dataset: str = "cifar10",
    storage: str = "",
    options: Mapping[str, Any] | None = None,
) -> CampaignSpec:
    """A validated spec for the trivial bench trainer."""
    data = {
        "study": {
            "name": name,
            "direction": "maximize",
            "metric": metric,
            "sampler": sampler,
            "seed": seed,
            "n_trials": n_trials,
            "storage": storage,
        },
        "trainer": {
            "entry": TRAINER,
            "dataset": dataset,
            "epochs": epochs,
            "checkpoint_every": 1,
            "options": dict(options or {}),
        },
        "space": dict(space),
    }
    return parse_spec(data, source=f"<bench {name}>", text=json.dumps(data, indent=1))


def open_study(spec: CampaignSpec, folder: CampaignFolder, storage: str) -> optuna.Study:
    """``memory``: an in-memory study; ``journal``/``sqlite``: the storage the campaign opens for
    ``spec.study.storage`` (build the spec with ``storage=storage_setting(storage)``)."""
    if storage == "memory":
        return optuna.create_study(
            study_name=spec.study.name,
            sampler=make_sampler(spec.study.sampler, spec.space, spec.study.seed),
            pruner=make_pruner(spec.study.pruner, spec.pruning) or optuna.pruners.NopPruner(),
            directions=list(spec.study.directions),
        )
    return load_study(spec, folder, create=True)


STORAGES = {"memory": "", "journal": "", "sqlite": "sqlite"}  # bench label -> the spec's [study] storage


def storage_setting(storage: str) -> str:
    """The spec's ``[study] storage`` for a bench label: ``""`` (the default, the group-commit journal
    file) for ``journal``, ``"sqlite"`` (the campaign's SQLite file) for ``sqlite``; ``memory`` studies
    are created in memory by :func:`open_study` and never open the spec's storage."""
    if storage not in STORAGES:
        raise ValueError(f"storage={storage!r}: must be memory, journal or sqlite")
    return STORAGES[storage]


# --- one simulated campaign ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SimResult:
    bench: str
    workers: int
    sampler: str
    storage: str
    trials: int
    failure_rate: float
    real_s: float
    ctrl_ms_per_trial: float
    ctrl_trials_per_s: float
    needed_trials_per_s: float
    util: float
    util_all: float
    makespan_s: float
    lost: int
    best: float
    regret: float
    t_best: float
    t_regret1: float
    util_end: float = math.nan
    rss_mb: float = math.nan
    join_s: float = 0.0
    sampling: str = "inline"
    sampler_ms_per_trial: float = 0.0


def best_over_time(study: optuna.Study) -> list[tuple[float, float]]:
    """(virtual finish time, best value so far) for every completed trial, in finish order."""
    done = [TrialRecord.of(t) for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))]
    done.sort(key=lambda r: math.inf if r.finished is None else r.finished)
    out: list[tuple[float, float]] = []
    best = -math.inf
    for r in done:
        assert r.finished is not None and r.values, f"trial {r.number} recorded no finish time or value"
        best = max(best, float(r.values[0]))
        out.append((r.finished, best))
    return out


def _first_time(curve: Sequence[tuple[float, float]], target: float) -> float:
    return next((at for at, best in curve if best >= target), math.nan)


def simulate(
    n_workers: int,
    sampler: str,
    n_trials: int,
    *,
    bench: str = "nb201",
    storage: str = "memory",
    seed: int = 0,
    failure_rate: float = 0.0,
    controller_time_scale: float = 1.0,
    dataset: str = "cifar10",
    workdir: Path | None = None,
    join_seconds: float = 0.0,
    sampler_process: bool = False,
) -> tuple[SimResult, SimulatedExecutor, optuna.Study]:
    """Run one campaign against ``n_workers`` simulated workers; return its figures."""
    model: TrialModel
    if bench == "nb201":
        table = TableModel(NB201_CSV, trial_seconds=TRIAL_SECONDS, jitter=0.1)
        model, space, optimum = table, nb201_space(), table.best(dataset)
    elif bench == "curve":
        optimum_params = {"lr": 3e-3, "weight_decay": 1e-4, "width": 128}
        model = CurveModel(seed=seed, optimum=optimum_params, epoch_seconds=TRIAL_SECONDS / EPOCHS)
        space = curve_space()
        optimum = 100.0 * 0.95  # the model's ceiling, in the same % units as the table
    else:
        raise ValueError(f"bench={bench!r}: must be nb201 or curve")
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        spec = bench_spec(
            f"sim-{bench}-{sampler}-{n_workers}",
            space,
            sampler,
            n_trials,
            seed=seed,
            dataset=dataset,
            storage=storage_setting(storage),
        )
        folder = CampaignFolder(Path(tmp) / spec.study.name)
        folder.create(spec.text)
        study = open_study(spec, folder, storage)
        executor = SimulatedExecutor(
            n_workers,
            model,
            seed=seed,
            failure_rate=failure_rate,
            controller_time_scale=controller_time_scale,
            join_seconds=join_seconds,
            sampler_process=sampler_process,
        )
        started = time.perf_counter()
        campaign = Campaign(spec, folder, study, executor, clock=executor.clock)
        campaign.run()
        real = time.perf_counter() - started
        rss_mb = round(resident_mb(), 1)
        curve = best_over_time(study)
        if bench == "curve":
            curve = [(at, 100.0 * best) for at, best in curve]
    intervals = [iv for ivs in executor.busy_intervals().values() for iv in ivs]
    first = max(min(s for s, _ in intervals), join_seconds)
    last_start = max(s for s, _ in intervals)
    finished = executor.counts["ok"] + executor.counts["lost"]
    ctrl = executor.controller_seconds / max(1, finished)
    best = curve[-1][1] if curve else math.nan
    result = SimResult(
        bench=bench,
        workers=n_workers,
        sampler=sampler,
        storage=storage,
        trials=finished,
        failure_rate=failure_rate,
        real_s=round(real, 2),
        ctrl_ms_per_trial=round(1e3 * ctrl, 3),
        ctrl_trials_per_s=round(1.0 / ctrl, 1) if ctrl > 0 else math.inf,
        needed_trials_per_s=round(n_workers / TRIAL_SECONDS, 1),
        util=round(executor.utilization(first, last_start) if last_start > first else executor.utilization(), 4),
        util_all=round(executor.utilization(), 4),
        makespan_s=round(executor.makespan(), 1),
        lost=executor.counts["lost"],
        best=round(best, 3),
        regret=round(optimum - best, 3),
        t_best=round(_first_time(curve, best), 1),
        t_regret1=round(_first_time(curve, optimum - 1.0), 1),
        util_end=round(executor.utilization(max(first, last_start - TRIAL_SECONDS), last_start), 4)
        if last_start > first
        else math.nan,
        rss_mb=rss_mb,
        join_s=join_seconds,
        sampling=str(campaign.supply.sampling),
        sampler_ms_per_trial=round(1e3 * executor.sampler_seconds / max(1, finished), 3),
    )
    return result, executor, study


# --- the command ---------------------------------------------------------------------------------


def _print_table(rows: Sequence[SimResult]) -> None:
    cols = [
        "bench",
        "workers",
        "sampler",
        "storage",
        "trials",
        "util",
        "util_all",
        "util_end",
        "ctrl_ms_per_trial",
        "ctrl_trials_per_s",
        "needed_trials_per_s",
        "real_s",
        "best",
        "regret",
        "t_best",
        "t_regret1",
        "lost",
        "rss_mb",
        "join_s",
        "sampling",
        "sampler_ms_per_trial",
    ]
    data = [[str(getattr(r, c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(d[i]) for d in data)) for i, c in enumerate(cols)]
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths)))
    for d in data:
        print("  ".join(v.rjust(w) for v, w in zip(d, widths)))


def _write_csv(rows: Sequence[SimResult], path: Path, reps: Sequence[int] | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    names = [f.name for f in dataclasses.fields(SimResult)]
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=names + (["reps"] if reps is not None else []))
        writer.writeheader()
        for i, row in enumerate(rows):
            writer.writerow(dataclasses.asdict(row) | ({"reps": reps[i]} if reps is not None else {}))


KEY_FIELDS = ("bench", "workers", "sampler", "storage", "failure_rate", "join_s", "sampling")


def median_rows(rows: Sequence[SimResult]) -> list[tuple[SimResult, int]]:
    """One row per configuration (bench, workers, sampler, storage, failure rate, join seconds), in first-seen order:
    the median of each numeric column over its repetitions, and how many there were."""
    groups: dict[tuple[Any, ...], list[SimResult]] = {}
    for r in rows:
        groups.setdefault(tuple(getattr(r, k) for k in KEY_FIELDS), []).append(r)
    out = []
    for group in groups.values():
        values: dict[str, Any] = {}
        for f in dataclasses.fields(SimResult):
            column = [getattr(r, f.name) for r in group]
            if f.name in KEY_FIELDS:
                values[f.name] = column[0]
            else:
                med = statistics.median(column)
                values[f.name] = type(column[0])(med) if isinstance(column[0], int) else round(float(med), 4)
        out.append((SimResult(**values), len(group)))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.simulate", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 and 64 workers, fewer trials (< 1 min)")
    parser.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=[16, 64, 256, 1024],
        help="cluster sizes for the memory-storage rows (every sampler)",
    )
    parser.add_argument(
        "--samplers",
        nargs="*",
        default=["random", "tpe"],
        help="samplers of the memory-storage rows (none: no such rows)",
    )
    parser.add_argument("--waves", type=float, default=4.0, help="trials per worker (default 4)")
    parser.add_argument("--min-trials", type=int, default=256)
    parser.add_argument(
        "--storages",
        nargs="+",
        default=["sqlite", "journal"],
        choices=["sqlite", "journal"],
        help="durable storages, measured with --storage-samplers: journal = the default "
        "(group-commit journal file), sqlite = the campaign's SQLite file",
    )
    parser.add_argument(
        "--storage-samplers",
        nargs="+",
        default=["random"],
        help="samplers of the durable-storage rows (default random)",
    )
    parser.add_argument(
        "--storage-workers",
        type=int,
        nargs="+",
        default=[256],
        help="cluster sizes for the durable-storage rows (capped at the largest --workers)",
    )
    parser.add_argument("--no-curve", action="store_true", help="skip the learning-curve (TPE) row")
    parser.add_argument(
        "--failure-rate", type=float, default=0.02, help="injected worker failures for one extra run (0 = none)"
    )
    parser.add_argument(
        "--join-seconds",
        type=float,
        default=0.0,
        help="the durable-storage rows' workers join one by one over this many virtual seconds (default 0: all at once)",
    )
    parser.add_argument(
        "--sampler-process",
        action="store_true",
        help="the durable-storage rows model the sampler child process a real cluster runs tpe and gp in "
        "(its work on a core of its own, not the controller's clock); default: they sample on the loop",
    )
    parser.add_argument("--reps", type=int, default=1, help="repetitions of every row; the table shows medians")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS / "simulate.csv")
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("search").setLevel(logging.WARNING)
    freeze_after_loads()  # as the hypersweep command does: the loop's survivors leave the collector's walks
    workers = [16, 64] if args.quick else args.workers
    waves = 2.0 if args.quick else args.waves
    min_trials = 64 if args.quick else args.min_trials

    def n_trials(w: int) -> int:
        return max(min_trials, int(waves * w))

    print(
        f"# bench.simulate  {time.strftime('%Y-%m-%d %H:%M')}  {platform.node()}  python {sys.version.split()[0]}"
        f"  optuna {optuna.__version__}  trials of {TRIAL_SECONDS:g} virtual s, {EPOCHS} reports each"
        f"  reps {args.reps}"
    )
    rows: list[SimResult] = []

    def run(*a: Any, **kw: Any) -> None:
        result, _ex, _study = simulate(*a, seed=args.seed, **kw)
        rows.append(result)
        del _ex, _study
        gc.collect()  # the run's cycles go before the next one: each row's rss_mb is its own run's
        print(
            f"  {result.bench} {result.workers:5d} workers {result.sampler:6s} {result.storage:7s} "
            f"util {result.util:.4f} (last {TRIAL_SECONDS:g} s {result.util_end:.4f})  "
            f"ctrl {result.ctrl_ms_per_trial:.2f} ms/trial  real {result.real_s:.1f} s",
            flush=True,
        )

    storage_sizes = list(dict.fromkeys(min(w, max(workers)) for w in args.storage_workers))
    for _rep in range(args.reps):
        for w in workers:
            for sampler in args.samplers:
                run(w, sampler, n_trials(w))
        for size in storage_sizes:
            for storage in args.storages:
                for sampler in args.storage_samplers:
                    run(
                        size,
                        sampler,
                        n_trials(size),
                        storage=storage,
                        join_seconds=args.join_seconds,
                        sampler_process=args.sampler_process,
                    )
        if not args.no_curve:
            run(min(workers), "tpe", n_trials(min(workers)), bench="curve")
        if args.failure_rate > 0:
            run(min(workers), "random", n_trials(min(workers)), failure_rate=args.failure_rate)
    table = median_rows(rows)
    print()
    if args.reps > 1:
        print(f"medians of {args.reps} repetitions:")
    _print_table([r for r, _n in table])
    _write_csv([r for r, _n in table], args.out, reps=[n for _r, n in table])
    raw = args.out.with_name(args.out.stem + "-raw.csv")
    _write_csv(rows, raw)
    print("\nstorage: memory = in-memory study (not durable); journal = the default, the group-commit journal file;")
    print('  sqlite = the campaign\'s SQLite file ([study] storage = "sqlite")')
    print(f"wrote {args.out} (medians) and {raw}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
