"""hypersweep against the tools users would pick instead, measured in one run, 4 slots.

    python -m bench.overhead [--quick] [--reps 3] [--peers ...] [--measures ...] [--cluster embedded|tcp|tls]
                             [--profile]

(a) slot utilization on N x 100 ms and N x 1 s trials, random and TPE;
(b) trials/s on N trivial (0 s) trials, random and TPE;
(c) controller memory (RSS growth) and per-trial overhead at 10,000 trials;
(d) a slow sampler (1 s per ask, 6 s trials): the slots' busy fraction in steady state.

Definitions (printed with the table):
- utilization = sum of trial durations measured inside the trials (t1 - t0, by the
  trial function itself) / (4 slots x (last t1 - first t0)). The window starts at the
  first trial's start, so cluster start-up and study creation are not counted.
- trials/s = trials / wall seconds of the optimize call (campaign run, optimize,
  submit loop, ``Tuner.fit``), study creation and cluster start excluded. Every peer,
  Ray Tune included, runs the same number of trivial trials (1,000; 60 with --quick).
- ``startup_s`` (trivial trials): from the start of that call to the first trial's
  start (Ray Tune: its trial runner and the first actor; hypersweep: the sampler's
  child process and the first task); ``trials_per_s_ex_start`` = trials / (wall -
  startup_s), the rate once the first trial has started.
- ``tpe-bound`` / ``random-bound``: serial ask + tell on an in-memory study with no
  trial at all: the sampler's own ceiling, measured right after each hypersweep run
  of (b); ``share_of_bound`` = hypersweep's trials/s / that bound, per repetition.
- ``sampler_busy`` (hypersweep, trivial trials): the fraction of the run its sampling
  thread spent asking; near 1 means sampling is what limits the rate.
- ``util_slow_ask``: busy fraction of the slots from the start of the 4th trial to the
  start of the last (ramp-up and drain left out), with a sampler that sleeps 1 s per
  ask (a stand-in for GP or TPE on a large study) and 6 s trials.

Peers: ``hypersweep`` (the real Campaign + DaskExecutor on the cluster of 4
single-slot worker processes, the default storage: the group-commit journal file),
``hypersweep-sqlite`` (the same on the SQLite file), ``hypersweep-inline`` (the
sampler always on the loop's thread, never on its own), ``hypersweep-thread`` (the
sampler on a thread of the controller's process, not in a child process), ``hypersweep-tasks`` (every trial a
Dask task of its own, no slot runners: ``DaskExecutor(runners=False)``), ``optuna-threads``
(``study.optimize(n_jobs=4)``, in-memory), ``daskstorage-1``/``daskstorage-250``
(optuna-integration ``DaskStorage`` recipe, one ``study.optimize`` task per trial, or
per 250 trials, capped at trials / 4 so that every slot gets a task: 250 of the 1,000
trivial trials, 50 of the 200 x 100 ms, 25 of the 100 x 1 s, 5 of the 20 slow-sampler
trials), ``naive-mem``/``naive-sqlite`` (ask -> ``client.submit`` ->
``as_completed`` -> tell, 4 in flight), ``ray`` (Ray Tune, reuse_actors, 4
concurrent; skipped with a message unless ``pip install hypersweep[bench]``).
All Dask peers share one cluster of 4 single-slot worker processes, started once: ``--cluster embedded``
(default) is hypersweep's own LocalCluster; ``tcp`` and ``tls`` start ``dask scheduler`` and 4 ``hypersweep worker``
processes apart (:mod:`bench.external_cluster`; TLS with a throw-away CA), which every peer joins over the network,
hypersweep as a user's ``--scheduler`` does.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import functools
import io
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import optuna

from bench.overhead_peers import PEERS, Ctx, run_hypersweep, run_naive, sampler_bound
from bench.overhead_trials import SLOTS, SPACE, make_sampler, optuna_objective, steady_utilization, utilization

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

DASK_PEERS = (
    "hypersweep",
    "hypersweep-sqlite",
    "hypersweep-inline",
    "hypersweep-thread",
    "hypersweep-tasks",
    "optuna-threads",
    "daskstorage-1",
    "daskstorage-250",
    "naive-mem",
    "naive-sqlite",
)
SLOW_PEERS = (
    "hypersweep",
    "hypersweep-inline",
    "hypersweep-thread",
    "optuna-threads",
    "daskstorage-1",
    "daskstorage-250",
    "naive-mem",
)
ALL_PEERS = (*DASK_PEERS, "ray")
SLOW_ASK, SLOW_TRIAL = 1.0, 6.0  # (d): seconds per ask and per trial: 4 slots need an ask every 1.5 s
MEASURES = ("util_100ms", "util_1s", "trivial", "slow")  # --measures: (a) 100 ms, (a) 1 s, (b), (d)

log = logging.getLogger("bench.overhead")


# --- (c) controller memory and per-trial overhead at 10,000 trials -----------------------------------


def resident_mb() -> float:
    """This process's resident memory now, in MB (``VmRSS`` of ``/proc/self/status``; NaN where there is none)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def memory_probe(kind: str, n: int, seed: int) -> dict[str, float]:
    """Run in a fresh process: RSS growth and per-trial real time over ``n`` trials."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    import bench.simulate  # noqa: F401 - import cost before the baseline
    import search.loop.campaign  # noqa: F401

    before = resident_mb()
    with tempfile.TemporaryDirectory() as tmp:
        if kind.startswith("hypersweep"):
            from bench.simulate import bench_spec, open_study, storage_setting
            from cluster.simulated import CurveModel, SimulatedExecutor
            from search.loop.campaign import Campaign
            from search.store.folder import CampaignFolder

            storage = kind.removeprefix("hypersweep-") if "-" in kind else "journal"
            spec = bench_spec(
                "mem", SPACE, "random", n, seed=seed, epochs=10, metric="accuracy", storage=storage_setting(storage)
            )
            folder = CampaignFolder(Path(tmp) / "mem")
            folder.create(spec.text)
            study = open_study(spec, folder, storage)
            ex = SimulatedExecutor(
                SLOTS, CurveModel(seed=seed, epoch_seconds=0.1, jitter=0.0), controller_time_scale=0.0
            )
            start = time.perf_counter()
            Campaign(spec, folder, study, ex, clock=ex.clock).run()
            wall = time.perf_counter() - start
        elif kind == "optuna-threads":
            study = optuna.create_study(direction="maximize", sampler=make_sampler("random", seed))
            start = time.perf_counter()
            study.optimize(functools.partial(optuna_objective, timing_dir=tmp, sleep=0.0), n_trials=n, n_jobs=SLOTS)
            wall = time.perf_counter() - start
        else:
            raise ValueError(
                f"memory probe {kind!r}: must be hypersweep-journal, hypersweep-memory, "
                "hypersweep-sqlite or optuna-threads"
            )
        after = resident_mb()
    return {
        "rss_before_mb": before,
        "rss_after_mb": after,
        "rss_growth_mb": after - before,
        "ms_per_trial": 1e3 * wall / n,
    }


def run_memory_probe(kind: str, n: int, seed: int) -> dict[str, float]:
    cmd = [sys.executable, "-m", "bench.overhead", "--_probe", kind, "--_probe-n", str(n), "--seed", str(seed)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE.parent, timeout=1800, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"memory probe {kind} failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# --- the runner -----------------------------------------------------------------------------------------


def _spin() -> None:  # pragma: no cover - runs in a load process until it is terminated
    while True:
        pass


@contextlib.contextmanager
def background_load(n: int) -> Iterator[None]:
    """``n`` processes that each keep a core busy (a load of about ``n`` beside the run), stopped on exit."""
    import multiprocessing

    procs = [multiprocessing.get_context("spawn").Process(target=_spin, daemon=True) for _ in range(n)]
    for proc in procs:
        proc.start()
    try:
        yield
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.join(timeout=10)


@contextlib.contextmanager
def dask_cluster(kind: str = "embedded", folder: Path | None = None) -> Iterator[Any]:
    """A client of 4 single-slot workers: hypersweep's embedded cluster, or one started apart and joined over
    plain TCP or TLS (:mod:`bench.external_cluster`), as a user joins theirs (``--scheduler``)."""
    from cluster import ClusterOptions, open_cluster

    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore:DaskStorage is experimental"}
    if kind == "embedded":
        with open_cluster(ClusterOptions(n_workers=SLOTS, slots_per_worker=1), env=env) as client:
            client.wait_for_workers(SLOTS, timeout=60)
            yield client
        return
    from bench.external_cluster import external_cluster

    with (
        tempfile.TemporaryDirectory() as tmp,
        external_cluster(SLOTS, kind == "tls", folder or Path(tmp), env) as (
            address,
            tls,
        ),
        open_cluster(ClusterOptions(address=address, tls=tls)) as client,
    ):
        client.wait_for_workers(SLOTS, timeout=60)
        yield client


@contextlib.contextmanager
def ray_session() -> Iterator[bool]:
    try:
        import ray
        from ray import tune  # noqa: F401
    except ImportError:
        print("# ray: not installed, skipped (pip install 'hypersweep[bench]' to include Ray Tune)")
        yield False
        return
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    ray.init(num_cpus=SLOTS, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    try:
        yield True
    finally:
        ray.shutdown()


class Recorder:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(self, measure: str, sampler: str, peer: str, rep: int, value: float, unit: str) -> None:
        self.rows.append(
            {"measure": measure, "sampler": sampler, "peer": peer, "rep": rep, "value": value, "unit": unit}
        )
        load = os.getloadavg()[0]
        print(f"  {measure:21s} {sampler:6s} {peer:19s} rep {rep}: {value:.4g} {unit}  (load {load:.1f})", flush=True)

    def medians(self) -> dict[tuple[str, str, str], float]:
        groups: dict[tuple[str, str, str], list[float]] = {}
        for r in self.rows:
            groups.setdefault((r["measure"], r["sampler"], r["peer"]), []).append(r["value"])
        return {k: statistics.median(v) for k, v in groups.items()}


def startup_seconds(result: dict[str, Any]) -> float:
    """From the start of the optimize call to the first trial's start (nan without trials)."""
    if not result["spans"]:
        return float("nan")
    return min(s for s, _ in result["spans"]) - result["started_at"]


def measure_peer(
    rec: Recorder,
    ctx: Ctx,
    peer: str,
    rep: int,
    sizes: dict[str, int],
    samplers: Sequence[str],
    measures: Sequence[str] = MEASURES,
) -> None:
    fn = PEERS[peer]
    for sampler in samplers:
        for measure, n, sleep in (("util_100ms", sizes["n100ms"], 0.1), ("util_1s", sizes["n1s"], 1.0)):
            if measure not in measures or n == 0:
                continue
            try:
                result = fn(ctx, n, sleep, sampler)
            except Exception as exc:  # noqa: BLE001 - one peer failing must not end the comparison
                print(f"  {measure} {sampler} {peer}: FAILED {type(exc).__name__}: {exc}", flush=True)
                continue
            rec.add(measure, sampler, peer, rep, utilization(result["spans"]), "fraction")
        if "trivial" not in measures:
            continue
        n = sizes["ntrivial"]
        try:
            result = fn(ctx, n, 0.0, sampler)
        except Exception as exc:  # noqa: BLE001
            print(f"  trials_per_s {sampler} {peer}: FAILED {type(exc).__name__}: {exc}", flush=True)
            continue
        rate = len(result["spans"]) / result["wall"]
        rec.add("trials_per_s", sampler, peer, rep, rate, "trials/s")
        startup = startup_seconds(result)
        rec.add("startup_s", sampler, peer, rep, startup, "s")
        rec.add(
            "trials_per_s_ex_start", sampler, peer, rep, len(result["spans"]) / (result["wall"] - startup), "trials/s"
        )
        if peer == "hypersweep":
            rec.add("sampler_busy", sampler, peer, rep, result["sampler_busy"], "fraction")
            bound = sampler_bound(n, sampler, ctx.seed)  # right after, so both see the same machine load
            rec.add("trials_per_s", sampler, f"{sampler}-bound", rep, bound, "trials/s")
            rec.add("share_of_bound", sampler, peer, rep, rate / bound, "fraction")
    if "slow" in measures:
        measure_slow_sampler(rec, ctx, peer, rep, sizes)


def measure_slow_sampler(rec: Recorder, ctx: Ctx, peer: str, rep: int, sizes: dict[str, int]) -> None:
    """(d) a sampler taking SLOW_ASK s per ask, trials of SLOW_TRIAL s: do the other slots stay busy?"""
    if peer not in SLOW_PEERS or not sizes.get("nslow"):
        return
    try:
        result = PEERS[peer](ctx, sizes["nslow"], SLOW_TRIAL, "random", delay=SLOW_ASK)
    except Exception as exc:  # noqa: BLE001
        print(f"  util_slow_ask {peer}: FAILED {type(exc).__name__}: {exc}", flush=True)
        return
    rec.add("util_slow_ask", f"{SLOW_ASK:g}s", peer, rep, steady_utilization(result["spans"]), "fraction")


def _warm_up(ctx: Ctx) -> None:
    """Import the trial code on every worker and run one tiny campaign, so no peer pays for first imports."""
    run_hypersweep(ctx, 8, 0.0, "random")
    run_naive(ctx, 8, 0.0, "random", "memory")


def print_table(rec: Recorder, peers: Sequence[str]) -> list[str]:
    med = rec.medians()
    keys = sorted({(m, s) for m, s, _p in med}, key=lambda k: (k[0], k[1]))
    cols = list(dict.fromkeys(r["peer"] for r in rec.rows))
    lines = []
    head = f"{'measure':21s} {'sampler':7s} " + " ".join(f"{p:>18s}" for p in cols)
    lines.append(head)
    for m, s in keys:
        vals = [med.get((m, s, p)) for p in cols]
        lines.append(f"{m:21s} {s:7s} " + " ".join(f"{v:18.4g}" if v is not None else f"{'-':>18s}" for v in vals))
    lines.append("")
    lines.append(
        "ratio hypersweep / peer (util, trials/s: > 1 = hypersweep better; ms, MB: > 1 = hypersweep costs more)"
    )
    lines.append(head)
    for m, s in keys:
        ours = med.get((m, s, "hypersweep"))
        vals = [ours / med[(m, s, p)] if ours is not None and med.get((m, s, p)) else None for p in cols]
        lines.append(f"{m:21s} {s:7s} " + " ".join(f"{v:18.3f}" if v is not None else f"{'-':>18s}" for v in vals))
    for line in lines:
        print(line)
    return lines


def write_csv(rec: Recorder, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    med = rec.medians()
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["measure", "sampler", "peer", "median", "reps", "ratio_hypersweep_over_peer"])
        counts: dict[tuple[str, str, str], int] = {}
        for r in rec.rows:
            key = (r["measure"], r["sampler"], r["peer"])
            counts[key] = counts.get(key, 0) + 1
        for key, value in sorted(med.items()):
            ours = med.get((key[0], key[1], "hypersweep"))
            ratio = ours / value if ours is not None and value else ""
            writer.writerow([*key, value, counts[key], ratio])


def profile_campaign(ctx: Ctx, n: int, sleep: float, sampler: str, out: Path) -> None:
    """cProfile the controller's thread over one hypersweep campaign."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    result = run_hypersweep(ctx, n, sleep, sampler)
    profiler.disable()
    buf = io.StringIO()
    stats = pstats.Stats(profiler, stream=buf)
    stats.sort_stats("cumulative").print_stats(45)
    stats.sort_stats("tottime").print_stats(25)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        f"# hypersweep {n} x {sleep * 1e3:g} ms, {sampler}: wall {result['wall']:.2f} s, "
        f"utilization {utilization(result['spans']):.3f}\n" + buf.getvalue()
    )
    print(f"profile written to {out} (wall {result['wall']:.2f} s, utilization {utilization(result['spans']):.3f})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.overhead", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repetition, a smoke run (< 2 min)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--peers", nargs="+", default=list(ALL_PEERS), choices=ALL_PEERS)
    parser.add_argument("--samplers", nargs="+", default=["random", "tpe"], choices=["random", "tpe"])
    parser.add_argument(
        "--measures",
        nargs="+",
        default=list(MEASURES),
        choices=MEASURES,
        help="util_100ms, util_1s: (a); trivial: (b) trials/s; slow: (d) the slow sampler",
    )
    parser.add_argument("--memory-trials", type=int, default=10_000)
    parser.add_argument("--no-memory", action="store_true", help="skip (c)")
    parser.add_argument("--profile", action="store_true", help="only cProfile hypersweep on 200 x 100 ms trials")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--cluster",
        default="embedded",
        choices=("embedded", "tcp", "tls"),
        help="the 4 workers: hypersweep's embedded cluster, or a scheduler and workers started apart and joined "
        "over plain TCP or TLS (every Dask peer uses the same one)",
    )
    parser.add_argument(
        "--load",
        type=int,
        default=0,
        help="busy processes to run beside the whole run (a load of about that many more: 4 on 2 cores)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "overhead.csv")
    parser.add_argument("--_probe", help=argparse.SUPPRESS)
    parser.add_argument("--_probe-n", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "error")  # read by dask at import, here and in workers
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    for name in ("distributed", "search", "cluster", "optuna_integration"):
        logging.getLogger(name).setLevel(logging.ERROR)
    if args._probe:
        print(json.dumps(memory_probe(args._probe, args._probe_n, args.seed)))
        return 0

    if args.quick:
        sizes = {"n100ms": 20, "n1s": 4, "ntrivial": 60, "nslow": 8}
        reps, memory_n = 1, 300
    else:
        sizes = {"n100ms": 200, "n1s": 100, "ntrivial": 1000, "nslow": 20}
        reps, memory_n = args.reps, args.memory_trials
    print(
        f"# bench.overhead  {time.strftime('%Y-%m-%d %H:%M')}  {platform.node()}  {os.cpu_count()} cpus  "
        f"python {sys.version.split()[0]}  optuna {optuna.__version__}  slots {SLOTS}  reps {reps}  "
        f"sizes {sizes}  measures {' '.join(args.measures)}  cluster {args.cluster}  load +{args.load}  "
        f"loadavg {os.getloadavg()[0]:.1f}"
    )
    rec = Recorder()
    with tempfile.TemporaryDirectory() as tmp, background_load(args.load):
        dask_peers = [p for p in args.peers if p != "ray"]
        if dask_peers or args.profile:
            with dask_cluster(args.cluster) as client:
                ctx = Ctx(client, Path(tmp), args.seed)
                _warm_up(ctx)
                if args.profile:
                    profile_campaign(ctx, 200, 0.1, "random", RESULTS / "profile-random.txt")
                    profile_campaign(ctx, 200, 0.1, "tpe", RESULTS / "profile-tpe.txt")
                    return 0
                for rep in range(reps):
                    for peer in dask_peers:
                        measure_peer(rec, ctx, peer, rep, sizes, args.samplers, args.measures)
        if "ray" in args.peers:
            with ray_session() as have_ray:
                if have_ray:
                    ctx = Ctx(None, Path(tmp), args.seed)
                    for rep in range(reps):
                        measure_peer(rec, ctx, "ray", rep, sizes, args.samplers, args.measures)
    if "hypersweep" not in args.peers and "trivial" in args.measures:  # else measured beside each hypersweep run
        for rep in range(reps):
            for sampler in args.samplers:
                bound = sampler_bound(sizes["ntrivial"], sampler, args.seed)
                rec.add("trials_per_s", sampler, f"{sampler}-bound", rep, bound, "trials/s")
    if not args.no_memory:
        for kind in ("hypersweep-journal", "hypersweep-memory", "optuna-threads"):
            try:
                probe = run_memory_probe(kind, memory_n, args.seed)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"  memory {kind}: FAILED {exc}")
                continue
            peer = "hypersweep" if kind == "hypersweep-journal" else kind
            rec.add(f"rss_mb@{memory_n}", "random", peer, 0, probe["rss_growth_mb"], "MB")
            rec.add(f"ms_per_trial@{memory_n}", "random", peer, 0, probe["ms_per_trial"], "ms")
    print()
    print("utilization = sum of in-trial durations / (4 slots x (last trial end - first trial start))")
    print("trials_per_s = trials / wall of the optimize call (every peer the same number of trials);")
    print("startup_s = optimize call start -> first trial start; trials_per_s_ex_start = trials / (wall - startup_s);")
    print("rss = controller RSS growth over the run;")
    print(
        "sampler_busy = share of the run hypersweep's sampler (thread or child process) spent asking (1 = sampling is the limit)"
    )
    print(
        "share_of_bound = hypersweep trials/s / the sampler's serial ask+tell rate measured right after it (1 = the sampler is the limit)"
    )
    print("util_slow_ask = steady-state busy slots (4th trial start .. last trial start), 1 s asks, 6 s trials")
    print("ms_per_trial (c) = controller real time per trial, 10 reports each (hypersweep on the simulated executor,")
    print("  journal storage; hypersweep-memory = in-memory storage; optuna-threads: 0 reports, in-memory)")
    print()
    print_table(rec, args.peers)
    write_csv(rec, args.out)
    raw = args.out.with_name(args.out.stem + "-raw.csv")
    with open(raw, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["measure", "sampler", "peer", "rep", "value", "unit"])
        writer.writeheader()
        writer.writerows(rec.rows)
    print(f"\nwrote {args.out} and {raw}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
