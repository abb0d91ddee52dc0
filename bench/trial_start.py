"""How long a trial's own process takes to start training: a fresh interpreter vs the worker's warm pool (issue 54).

    python -m bench.trial_start [--repeat 5] [--case solo|dask|gloo|all]

``solo``: ``trainers.ddp.launch_solo`` (a trial holding a lease) called here, the time from the call to the trainer's
first line, and to the end of its first optimizer step (torch imported, a model and an SGD optimizer built: what
``torch._dynamo`` adds is paid there); ``dask``: the CPU twin through Dask, one worker declaring ``GPU=1`` (fake,
no CUDA), trials one after another, from the trial's start on its worker (``Outcome.started``) to the same two
points; ``gloo``: a 2-rank gloo trial (``trainers.ddp.launch``), from the call to the later rank's first line and
to its first data-parallel step, the rendezvous (``init_process_group``, after torch is imported, until both
ranks are in), and from the call to the process group being up on both. Fresh: ``HYPERSWEEP_WARM_POOL=0`` (or the pool
off); the pool's first trial (which starts the server) is shown apart from the median of the others.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.fake_gpus import fake_gpu_cluster

ROOT = Path(__file__).resolve().parents[1]
ENTRY = "bench.start_trainers:first_step_fit"
GLOO_ENTRY = "bench.start_trainers:gloo_fit"


def cuda_start(repeat: int = 3, visible: str = "0") -> dict[str, Any]:
    """On a GPU machine (``bench.gpu_check``): the solo case with CUDA, fresh vs the pool; medians in seconds, the
    pool's first trial (its server's start) apart, and each way's CUDA memory peaks (each process its own)."""
    from trainers import warm_pool
    from trainers.ddp import launch_solo

    entry = "bench.start_trainers:cuda_first_step_fit"

    def one(number: int) -> dict[str, float]:
        start = time.time()
        m = launch_solo(entry, _config(number, devices=(0,)), _Quiet(), visible)
        return {"first_line_s": m["entered"] - start, "first_step_s": m["first_step"] - start, "peak": m["peak"]}

    def medians(rows: list[dict[str, float]]) -> dict[str, float]:
        return {k: statistics.median(r[k] for r in rows) for k in ("first_line_s", "first_step_s")}

    fresh = [one(n) for n in range(repeat)]
    warm_pool.enable()
    try:
        pooled = [one(n) for n in range(repeat + 1)]
    finally:
        warm_pool.shutdown()
    return {
        "fresh": medians(fresh),
        "pool": medians(pooled[1:]),
        "pool_first": {k: pooled[0][k] for k in ("first_line_s", "first_step_s")},
        "peaks_mib": {"fresh": [r["peak"] / 2**20 for r in fresh], "pool": [r["peak"] / 2**20 for r in pooled]},
    }


class _Quiet:
    def report(self, step: int, metrics: Any) -> None:
        pass

    def should_stop(self) -> bool:
        return False


def _config(number: int, **fields: Any) -> Any:
    from trainers.api import TrialConfig

    return TrialConfig("start", number, {}, seed=number, epochs=1, **fields)


def _summary(label: str, rows: list[dict[str, float]], keys: Sequence[str]) -> None:
    first, rest = rows[0], rows[1:] or rows
    parts = [f"{k} {statistics.median(r[k] for r in rest):.3f} s (first {first[k]:.3f})" for k in keys]
    print(f"  {label:<22} median of {len(rest)}: " + ", ".join(parts))


def solo(repeat: int) -> None:
    from trainers import warm_pool
    from trainers.ddp import launch_solo

    def one(number: int) -> dict[str, float]:
        start = time.time()
        m = launch_solo(ENTRY, _config(number, devices=(0,)), _Quiet(), "0")
        return {"first line": m["entered"] - start, "first step": m["first_step"] - start}

    print("solo (launch_solo here, fake lease CUDA_VISIBLE_DEVICES=0):")
    _summary("fresh process", [one(n) for n in range(repeat)], ("first line", "first step"))
    warm_pool.enable()
    try:
        _summary("from the warm pool", [one(n) for n in range(repeat + 1)], ("first line", "first step"))
    finally:
        warm_pool.shutdown()


def gloo(repeat: int) -> None:
    from trainers import warm_pool
    from trainers.ddp import RankError, launch

    aborts = {"fresh processes": 0, "from the warm pool": 0}

    def one(number: int, way: str) -> dict[str, float]:
        for _ in range(3):  # gloo's teardown at a rank's exit aborts now and then (fresh processes too): again
            start = time.time()
            try:
                m = launch(GLOO_ENTRY, _config(number, device="cpu", data_parallel=2), _Quiet(), timeout=300)
                break
            except RankError as exc:
                if "SIGABRT" not in str(exc):
                    raise
                aborts[way] += 1
        else:
            raise RuntimeError("3 aborts in a row")
        return {
            "first line": m["entered"] - start,
            "rendezvous": m["joined"] - m["imported"],
            "group up": m["joined"] - start,
            "first step": m["first_step"] - start,
        }

    print("2-rank gloo trial (launch here):")
    keys = ("first line", "rendezvous", "group up", "first step")
    _summary("fresh processes", [one(n, "fresh processes") for n in range(repeat)], keys)
    warm_pool.enable()
    try:
        _summary("from the warm pool", [one(n, "from the warm pool") for n in range(repeat + 1)], keys)
    finally:
        warm_pool.shutdown()
    print(f"  rank exits aborted by gloo's teardown (run again): {aborts}")


def _dask_rows(repeat: int, pool: bool) -> list[dict[str, float]]:
    from distributed import Client

    from cluster.executor import DaskExecutor, GpuPacking, TrialRequest

    env = {"PYTHONPATH": str(ROOT), **({} if pool else {"HYPERSWEEP_WARM_POOL": "0"})}
    rows = []
    with fake_gpu_cluster(1, 1, 1, env=env) as cluster, Client(cluster) as client:
        executor = DaskExecutor(client, f"trial-start-{int(pool)}", packing=GpuPacking(gpus=1.0))
        try:
            for number in range(repeat):
                executor.submit(TrialRequest(number, ENTRY, _config(number)))
                done = _wait_finished(executor)
                m, started = done.outcome.metrics, float(done.outcome.started or 0.0)
                rows.append({"first line": m["entered"] - started, "first step": m["first_step"] - started})
        finally:
            executor.close()
    return rows


def _wait_finished(executor: Any) -> Any:
    from cluster.executor import Finished

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        for event in executor.events(0.2):
            if isinstance(event, Finished):
                if not event.outcome.ok:
                    raise RuntimeError(event.outcome.error)
                return event
    raise TimeoutError("a trial did not finish in 300 s")


def dask(repeat: int) -> None:
    print("CPU twin through Dask (1 worker, GPU=1 fake, trials one after another; from Outcome.started):")
    _summary("fresh process", _dask_rows(repeat, pool=False), ("first line", "first step"))
    _summary("from the warm pool", _dask_rows(repeat + 1, pool=True), ("first line", "first step"))


CASES: dict[str, Callable[[int], None]] = {"solo": solo, "dask": dask, "gloo": gloo}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.trial_start", description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="trials per way (default 5)")
    parser.add_argument("--case", choices=(*CASES, "all"), default="all")
    args = parser.parse_args(argv)
    sys.path[:0] = [str(ROOT)]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *os.environ.get("PYTHONPATH", "").split(os.pathsep)])
    with tempfile.TemporaryDirectory():
        for name, case in CASES.items():
            if args.case in (name, "all"):
                case(args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
