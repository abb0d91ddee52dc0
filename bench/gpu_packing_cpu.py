"""CPU twin of packed GPU trials and of out-of-memory handling, with figures (issue 26).

    python -m bench.gpu_packing_cpu packing [--trials 24 --hold 3]   # gpus = 0.25 on 2 fake GPU=2 workers
    HYPERSWEEP_WARM_POOL=0 python -m bench.gpu_packing_cpu packing   # the same, each trial's process fresh
    python -m bench.gpu_packing_cpu packing --torch                  # a torch lease holder (bench.start_trainers)
    python -m bench.gpu_packing_cpu oom [--trials 9]                 # injected CUDA OOMs on 2 CPU workers

``packing``: two Dask worker processes declaring ``GPU=2`` (8 threads each), no CUDA; prints how many
trials held each (worker, device) lease at once, at most and on average over the campaign, and the campaign's
wall time (from the controller's start to its end, the cluster already up).
``oom``: the built-in classifier on a "device" that holds 40 examples per pass, ``oom_retry = "accumulate"``,
TPE: prints trials, completed, retried at half the micro-batch, infeasible (out of memory).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path

from bench.fake_gpus import fake_gpu_cluster

ROOT = Path(__file__).resolve().parents[1]
TRAINERS = ROOT / "tests" / "search"  # gpu_trainers.py (a lease holder), oom_trainers.py (an OOM injector)


def _records(folder: Path, name: str) -> list:
    import optuna

    from search.store.records import TrialRecord
    from tests.campaign_storage import load

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return [TrialRecord.of(t) for t in load(folder, name).get_trials()]


def _run(text: str, runs: Path, scheduler: str | None = None) -> Path:
    from search.session.runner import RunOptions, run_campaign
    from search.spec.campaign_spec import parse_spec

    spec = parse_spec(tomllib.loads(text), str(runs / "spec.toml"), text)
    return run_campaign(spec, RunOptions(runs_dir=runs, scheduler=scheduler, progress=False)).root


def packing(trials: int, hold: float, folder: Path | None, torch_trainer: bool = False) -> None:
    from tests.search.loop.test_gpu_packing_campaign import SPEC

    if folder is not None:
        print_packing(_records(folder, "packed"))
        return
    text = SPEC.format(hold=hold).replace("n_trials = 24", f"n_trials = {trials}")
    if torch_trainer:
        text = text.replace('"gpu_trainers:packed_fit"', '"bench.start_trainers:packed_torch_fit"')
    with (
        tempfile.TemporaryDirectory() as tmp,
        fake_gpu_cluster(2, 2, 8) as cluster,
    ):
        start = time.monotonic()
        folder = _run(text, Path(tmp), cluster.scheduler_address)
        print(f"campaign wall time {time.monotonic() - start:.1f} s (warm pool: {_pool_state()})")
        print_packing(_records(folder, "packed"))


def _pool_state() -> str:
    return "off, HYPERSWEEP_WARM_POOL=0" if os.environ.get("HYPERSWEEP_WARM_POOL") == "0" else "on"


def print_packing(records: list) -> None:
    from tests.search.loop.test_gpu_packing_campaign import concurrency

    per_lease = concurrency(records, lambda r: (r.worker.rsplit(":", 1)[-1], r.devices[0]))
    print(
        f"{len(records)} trials, gpus = 0.25, 2 workers x GPU=2 (fake); states "
        f"{sorted({r.state.name for r in records})}"
    )
    for (port, device), most in sorted(per_lease.items()):
        mine = [r for r in records if (r.worker.rsplit(":", 1)[-1], r.devices[0]) == (port, device)]
        busy = sum(r.finished - r.started for r in mine)
        span = max(r.finished for r in mine) - min(r.started for r in mine)
        print(
            f"  worker :{port} GPU {device}: {len(mine)} trials, at most {most} at once, "
            f"{busy / span:.2f} on average while it had any"
        )
    for r in records:
        if r.state.name == "FAIL":
            print(f"  trial {r.number} failed: {r.reason}")
    own = {r.metrics.get("pid") for r in records if r.metrics}
    seen = sorted({r.metrics.get("device") for r in records if r.metrics})
    print(f"  {len(own)} trial processes for {len(records)} trials; CUDA_VISIBLE_DEVICES seen inside: {seen}")
    peaks = [r.peak_memory / 2**20 for r in records if r.peak_memory]
    print(f"  peak memory (rss, MiB): min {min(peaks):.0f}, max {max(peaks):.0f}")


def oom(trials: int, folder: Path | None) -> None:
    from tests.search.loop.test_oom_campaign import SPEC

    text = SPEC.format(sampler="tpe", oom_retry="accumulate").replace("n_trials = 6", f"n_trials = {trials}")
    if folder is not None:
        records = _records(folder, "oom")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            records = _records(_run(text, Path(tmp)), "oom")
    retried = [r for r in records if r.metrics and r.metrics.get("oom_retries")]
    infeasible = [r for r in records if r.stop_reason == "out of memory"]
    print(
        f"{len(records)} trials: {sum(r.state.name == 'COMPLETE' for r in records)} complete, "
        f"{len(retried)} retried at half the micro-batch (batch sizes "
        f"{sorted(int(r.params['batch_size']) for r in retried)}), {len(infeasible)} infeasible (out of memory; "
        f"batch sizes {sorted(int(r.params['batch_size']) for r in infeasible)}), "
        f"{sum(r.retries for r in records)} worker-loss retries"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_packing_cpu", description=__doc__.split("\n")[0])
    parser.add_argument("case", choices=("packing", "oom"))
    parser.add_argument("--trials", type=int, default=0)
    parser.add_argument("--hold", type=float, default=3.0, help="seconds each packed trial holds its lease")
    parser.add_argument("--torch", action="store_true", help="packing: a lease holder that trains a step with torch")
    parser.add_argument("--folder", type=Path, default=None, help="summarise this finished campaign folder instead")
    args = parser.parse_args(argv)
    sys.path[:0] = [str(TRAINERS), str(ROOT)]
    if args.case == "packing":
        packing(args.trials or 24, args.hold, args.folder, args.torch)
    else:
        oom(args.trials or 9, args.folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
