"""The peers of ``bench.overhead``: hypersweep and the tools users would pick instead, each run as ``PEERS[name](ctx,
n, sleep, sampler)``; the sampler's own ceiling (:func:`sampler_bound`)."""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

from bench.overhead_trials import (
    SLOTS,
    SPACE,
    DelayedSampler,
    make_sampler,
    naive_task,
    optuna_objective,
    read_timings,
    score,
    timed_sleep,
)

__all__ = ["PEERS", "Ctx", "run_hypersweep", "run_naive", "sampler_bound"]


class Ctx:
    """What a peer run gets: the shared Dask client (or None), a scratch folder, the seed."""

    def __init__(self, client: Any, workdir: Path, seed: int) -> None:
        self.client, self.workdir, self.seed = client, workdir, seed

    def scratch(self) -> Path:
        path = self.workdir / uuid.uuid4().hex[:10]
        path.mkdir(parents=True)
        return path


def run_hypersweep(
    ctx: Ctx,
    n: int,
    sleep: float,
    sampler: str,
    storage: str = "",
    delay: float = 0.0,
    sampling: str | None = None,
    runners: bool = True,
) -> dict[str, Any]:
    from bench.simulate import bench_spec
    from cluster import DaskExecutor
    from search.loop.campaign import Campaign
    from search.session.runner import load_study
    from search.store.folder import CampaignFolder
    from search.store.records import TrialRecord

    spec = bench_spec(
        f"hs-{uuid.uuid4().hex[:6]}",
        SPACE,
        sampler,
        n,
        seed=ctx.seed,
        epochs=1,
        metric="score",
        storage=storage,
        options={"sleep": sleep},
    )
    folder = CampaignFolder(ctx.scratch() / spec.study.name)
    folder.create(spec.text)
    study = load_study(spec, folder, create=True)
    if delay:
        study.sampler = DelayedSampler(study.sampler, delay)
    started_at, start = time.time(), time.perf_counter()
    executor = DaskExecutor(ctx.client, f"bench-{spec.study.name}", runners=runners)
    campaign = Campaign(spec, folder, study, executor, sampling=sampling)
    campaign.run()
    wall = time.perf_counter() - start
    spans = []
    for t in study.get_trials(deepcopy=False):
        m = TrialRecord.of(t).metrics or {}
        if "t0" in m:
            spans.append((float(m["t0"]), float(m["t1"])))
    busy = campaign.supply.times.busy_seconds / wall if wall > 0 else float("nan")  # how busy the sampler was
    return {"wall": wall, "started_at": started_at, "spans": spans, "done": len(spans), "sampler_busy": busy}


def run_optuna_threads(ctx: Ctx, n: int, sleep: float, sampler: str, delay: float = 0.0) -> dict[str, Any]:
    timing = str(ctx.scratch())
    study = optuna.create_study(direction="maximize", sampler=make_sampler(sampler, ctx.seed, delay))
    started_at, start = time.time(), time.perf_counter()
    study.optimize(functools.partial(optuna_objective, timing_dir=timing, sleep=sleep), n_trials=n, n_jobs=SLOTS)
    return {"wall": time.perf_counter() - start, "started_at": started_at, "spans": read_timings(timing)}


def run_daskstorage(ctx: Ctx, n: int, sleep: float, sampler: str, per_task: int, delay: float = 0.0) -> dict[str, Any]:
    from distributed import wait
    from optuna_integration import DaskStorage

    timing = str(ctx.scratch())
    storage = DaskStorage(optuna.storages.InMemoryStorage(), name=f"bench-{uuid.uuid4().hex[:8]}", client=ctx.client)
    study = optuna.create_study(direction="maximize", storage=storage, sampler=make_sampler(sampler, ctx.seed, delay))
    objective = functools.partial(optuna_objective, timing_dir=timing, sleep=sleep)
    started_at, start = time.time(), time.perf_counter()
    per_task = max(1, min(per_task, n // SLOTS))  # never fewer tasks than slots
    sizes = [per_task] * (n // per_task) + ([n % per_task] if n % per_task else [])
    futures = [ctx.client.submit(study.optimize, objective, n_trials=k, pure=False) for k in sizes]
    wait(futures)
    for f in futures:
        f.result()
    return {"wall": time.perf_counter() - start, "started_at": started_at, "spans": read_timings(timing)}


def run_naive(ctx: Ctx, n: int, sleep: float, sampler: str, storage: str, delay: float = 0.0) -> dict[str, Any]:
    from distributed import as_completed

    timing = str(ctx.scratch())
    url = None if storage == "memory" else f"sqlite:///{ctx.scratch() / 'study.db'}"
    study = optuna.create_study(direction="maximize", storage=url, sampler=make_sampler(sampler, ctx.seed, delay))
    started_at, start = time.time(), time.perf_counter()

    def launch() -> Any:
        trial = study.ask()
        x, y = trial.suggest_float("x", 0.0, 1.0), trial.suggest_float("y", 0.0, 1.0)
        future = ctx.client.submit(naive_task, x, y, timing, sleep, pure=False)
        numbers[future.key] = trial.number
        return future

    numbers: dict[str, int] = {}
    asked = min(SLOTS, n)
    pending = as_completed([launch() for _ in range(asked)])
    for future in pending:
        study.tell(numbers.pop(future.key), future.result())
        if asked < n:
            pending.add(launch())
            asked += 1
    return {"wall": time.perf_counter() - start, "started_at": started_at, "spans": read_timings(timing)}


def ray_trainable(config: dict[str, Any]) -> None:
    from ray import tune

    timed_sleep(config["timing_dir"], config["sleep"])
    tune.report({"score": score(config["x"], config["y"])})


def run_ray(ctx: Ctx, n: int, sleep: float, sampler: str) -> dict[str, Any]:
    from ray import tune
    from ray.tune.search.optuna import OptunaSearch

    timing = str(ctx.scratch())
    search_alg = OptunaSearch(sampler=make_sampler(sampler, ctx.seed), metric="score", mode="max")
    space = {"x": tune.uniform(0.0, 1.0), "y": tune.uniform(0.0, 1.0), "timing_dir": timing, "sleep": sleep}
    tuner = tune.Tuner(
        tune.with_resources(ray_trainable, {"cpu": 1}),
        param_space=space,
        tune_config=tune.TuneConfig(
            metric="score",
            mode="max",
            num_samples=n,
            max_concurrent_trials=SLOTS,
            search_alg=search_alg,
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(storage_path=str(ctx.scratch()), verbose=0),
    )
    started_at, start = time.time(), time.perf_counter()
    tuner.fit()  # includes the trial runner's set-up and the actors' start: see startup_s
    return {"wall": time.perf_counter() - start, "started_at": started_at, "spans": read_timings(timing)}


PEERS: dict[str, Callable[..., dict[str, Any]]] = {
    "hypersweep": run_hypersweep,
    "hypersweep-sqlite": functools.partial(run_hypersweep, storage="sqlite"),
    "hypersweep-inline": functools.partial(run_hypersweep, sampling="inline"),
    "hypersweep-thread": functools.partial(run_hypersweep, sampling="thread"),
    "hypersweep-tasks": functools.partial(run_hypersweep, runners=False),
    "optuna-threads": run_optuna_threads,
    "daskstorage-1": functools.partial(run_daskstorage, per_task=1),
    "daskstorage-250": functools.partial(run_daskstorage, per_task=250),
    "naive-mem": functools.partial(run_naive, storage="memory"),
    "naive-sqlite": functools.partial(run_naive, storage="sqlite"),
    "ray": run_ray,
}


def sampler_bound(n: int, sampler: str, seed: int) -> float:
    """Serial ask + tell on an in-memory study, nothing else: the sampler's own trials/s."""
    study = optuna.create_study(direction="maximize", sampler=make_sampler(sampler, seed))
    start = time.perf_counter()
    for _ in range(n):
        trial = study.ask()
        study.tell(trial, score(trial.suggest_float("x", 0.0, 1.0), trial.suggest_float("y", 0.0, 1.0)))
    return n / (time.perf_counter() - start)
