"""GPU check: data-parallel scaling of one trial, and a campaign keeping every GPU busy.

    python -m bench.gpu_check [--quick] [--out bench/results/gpu_check.json]

One command, a few minutes on a GPU machine (well under 10). It measures

1. one trial of the built-in classifier (a wide MLP on a scaled-up synthetic
   dataset) on 1 GPU and on all n GPUs (``data_parallel = n``, NCCL, the same
   per-GPU batch, so the global batch grows with n): training examples per
   second over the epochs after the first (warm-up), and the scaling efficiency
   ``throughput(n) / (n * throughput(1))``;
2. a short campaign (``hypersweep run`` on a generated spec) of 1-GPU trials,
   2 per GPU, with ``nvidia-smi`` sampling each GPU's utilization every 0.5 s
   in a background thread: mean utilization while the campaign runs, and the
   fraction of samples in which the GPU was busy (> 0%);
3. packing: the same small trials with ``[trainer] gpus = 1``, ``0.5`` and ``0.25``
   (1, 2 and 4 trials per GPU at once): trials per hour, the GPU busy fraction and
   mean utilization, and the trials' peak device memory (``summary.csv``);
4. a two-rank NCCL trial (``data_parallel = 2`` on GPUs 0 and 1; needs two GPUs,
   else the record says why it was not run);
5. a trial's start in its own process on GPU 0 (issue 54): the time from the launch to the trainer's first
   line and to its first optimizer step on ``cuda:0``, a fresh process vs the warm pool
   (``bench.trial_start.cuda_start``), and each process's own CUDA memory peak.

It prints a short table and writes the figures (with the GPU model, driver,
torch and CUDA versions, and the date) to JSON. With one GPU only the 1-GPU
trial runs (there is no "all GPUs" to compare), and the table says so. Without
a CUDA GPU it prints why and exits 0.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEFAULT_OUT = Path("bench/results/gpu_check.json")
PER_GPU_BATCH = 1024


def _gpus() -> tuple[int, str]:
    """(number of CUDA GPUs torch sees, why there are none)."""
    try:
        import torch
    except ImportError as exc:
        return 0, f"torch is not installed ({exc})"
    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        return 0, f"torch {torch.__version__} ({build}) sees no CUDA GPU"
    return torch.cuda.device_count(), ""


def _options(quick: bool) -> dict[str, Any]:
    return {"n_samples": 50_000 if quick else 200_000, "n_features": 512, "n_classes": 10, "torch_threads": 2}


def _params(k: int) -> dict[str, Any]:
    return {"lr": 0.02, "model": "mlp", "hidden": 2048, "depth": 4, "batch_size": PER_GPU_BATCH * k}


def throughput(k: int, epochs: int, quick: bool) -> dict[str, float]:
    """One trial on GPUs 0..k-1: examples/s over the epochs after the first, and the wall time."""
    from trainers.api import RecordingReporter, TrialConfig
    from trainers.classifier import fit

    config = TrialConfig(
        study="gpu-check",
        number=k,
        params=_params(k),
        seed=0,
        epochs=epochs,
        dataset="synthetic",
        device="cuda",
        devices=tuple(range(k)),
        data_parallel=k,
        options=_options(quick),
    )
    reporter = RecordingReporter()
    started = time.perf_counter()
    final = fit(config, reporter)
    wall = time.perf_counter() - started
    timed = [m for _, m in reporter.reports[1:]] or [m for _, m in reporter.reports]
    examples_per_epoch = final["examples"] / final["epoch"]
    seconds = sum(m["epoch_seconds"] for m in timed)
    return {
        "gpus": k,
        "global_batch": PER_GPU_BATCH * k,
        "examples_per_s": examples_per_epoch * len(timed) / seconds,
        "epoch_seconds": seconds / len(timed),
        "wall_s": wall,
        "val_accuracy": final["val_accuracy"],
    }


class UtilizationSampler(threading.Thread):
    """Samples ``nvidia-smi``'s per-GPU utilization (%) every ``every`` seconds until stopped."""

    def __init__(self, every: float = 0.5) -> None:
        super().__init__(name="gpu-utilization", daemon=True)
        self.every = every
        self.samples: list[list[float]] = []
        self.error = ""
        self._stop_event = threading.Event()

    def run(self) -> None:
        command = ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]
        while not self._stop_event.is_set():
            try:
                out = subprocess.run(command, capture_output=True, text=True, timeout=10, check=True).stdout
                self.samples.append([float(v) for v in out.split()])
            except (OSError, subprocess.SubprocessError, ValueError) as exc:
                self.error = f"nvidia-smi: {exc}"
                return
            self._stop_event.wait(self.every)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=15)

    def summary(self, n: int) -> dict[str, Any]:
        rows = [s for s in self.samples if len(s) >= n]
        if not rows:
            return {"samples": 0, "error": self.error or "no samples"}
        return {
            "samples": len(rows),
            "mean_percent": [sum(r[g] for r in rows) / len(rows) for g in range(n)],
            "busy_fraction": [sum(r[g] > 0 for r in rows) / len(rows) for g in range(n)],
        }


SPEC = """\
# written by bench/gpu_check.py: 1-GPU trials, two per GPU
[study]
name = "gpu-check"
direction = "maximize"
metric = "val_accuracy"
sampler = "random"
seed = 0
n_trials = {n_trials}
parallelism = {parallelism}

[trainer]
entry = "trainers.classifier:fit"
dataset = "synthetic"
epochs = {epochs}
device = "cuda"
gpus = {gpus}
options = {options}

[space]
lr = {{ type = "float", low = 1e-3, high = 0.1, log = true }}
hidden = {{ type = "categorical", choices = [1024, 2048] }}
depth = 4
batch_size = {batch}

[cluster]
n_workers = 0
"""


def _toml_inline(table: dict[str, Any]) -> str:
    return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in table.items()) + " }"


def campaign(
    n: int,
    epochs: int,
    quick: bool,
    timeout: float,
    per_gpu: int = 1,
    trials: int = 0,
    batch: int = PER_GPU_BATCH,
) -> dict[str, Any]:
    """``hypersweep run`` on ``trials`` (default 2n) trials, ``per_gpu`` at once on each GPU (``gpus = 1/per_gpu``),
    with utilization sampled while it runs."""
    trials = trials or 2 * n
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as folder:
        spec = Path(folder) / "gpu-check.toml"
        spec.write_text(
            SPEC.format(
                n_trials=trials,
                parallelism=n * per_gpu,
                epochs=epochs,
                options=_toml_inline(_options(quick)),
                batch=batch,
                gpus=1 / per_gpu,
            )
        )
        command = [sys.executable, "-m", "search.cli", "run", str(spec), "--runs-dir", folder, "--no-progress"]
        sampler = UtilizationSampler()
        sampler.start()
        started = time.perf_counter()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            done = None
        wall = time.perf_counter() - started
        sampler.stop()
        result: dict[str, Any] = {
            "trials": trials,
            "per_gpu": per_gpu,
            "wall_s": wall,
            "utilization": sampler.summary(n),
            "trials_per_hour": trials / wall * 3600,
        }
        if done is None:
            result["error"] = f"hypersweep run did not finish in {timeout:.0f} s"
        elif done.returncode != 0:
            result["error"] = f"hypersweep run exited {done.returncode}: {(done.stderr or done.stdout)[-2000:]}"
        summary = Path(folder) / "gpu-check" / "summary.csv"
        if summary.exists():
            import csv

            with summary.open() as f:
                rows = list(csv.DictReader(f))
            states = [row.get("state", "") for row in rows]
            result["states"] = {s: states.count(s) for s in sorted(set(states))}
            peaks = [float(row["peak_memory_mib"]) for row in rows if row.get("peak_memory_mib")]
            result["peak_memory_mib"] = max(peaks) if peaks else None
        return result


PACKING_TRIALS_PER_GPU = 8  # trials per GPU in each packing case: 8 runs of 1, 4 of 2, 2 of 4 at once


def packing(n: int, epochs: int, quick: bool, timeout: float) -> list[dict[str, Any]]:
    """The same small trials, 1, 2 and 4 per GPU at once: trials/hour and how busy the GPUs were."""
    return [
        campaign(n, epochs, quick, timeout, per_gpu=k, trials=PACKING_TRIALS_PER_GPU * n, batch=256) for k in (1, 2, 4)
    ]


def nccl_pair(n: int, epochs: int, quick: bool) -> dict[str, Any]:
    """A two-rank NCCL trial on GPUs 0 and 1 (NCCL refuses two ranks on one GPU)."""
    if n < 2:
        return {"skipped": f"a two-rank NCCL trial needs 2 GPUs; this machine has {n}"}
    return throughput(2, epochs, quick)


def trial_start() -> dict[str, Any]:
    """A trial's process on GPU 0, fresh vs from the warm pool (``bench.trial_start``); the error if it failed."""
    from bench.trial_start import cuda_start

    try:
        return cuda_start()
    except Exception as exc:  # noqa: BLE001 - a failed case is recorded, the other figures still written
        return {"error": f"{type(exc).__name__}: {exc}"[:2000]}


def _environment() -> dict[str, Any]:
    import torch

    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    driver = ""
    if shutil.which("nvidia-smi"):
        with_driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
        )
        driver = (
            with_driver.stdout.strip().splitlines()[0] if with_driver.returncode == 0 and with_driver.stdout else ""
        )
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "gpus": names,
        "driver": driver,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if torch.distributed.is_nccl_available() else "",
        "python": platform.python_version(),
        "host": platform.node(),
    }


def _table(record: dict[str, Any]) -> str:
    lines = [
        f"GPU check, {record['environment']['date']}: {len(record['environment']['gpus'])} x "
        f"{record['environment']['gpus'][0]} (torch {record['environment']['torch']}, CUDA "
        f"{record['environment']['cuda']})",
        "",
        "one trial          GPUs  global batch  examples/s  efficiency",
    ]
    for row in record["throughput"]:
        eff = row.get("efficiency")
        lines.append(
            f"  {'1 GPU' if row['gpus'] == 1 else 'all GPUs (DDP)':<16} {row['gpus']:>4}  {row['global_batch']:>12}"
            f"  {row['examples_per_s']:>10.0f}  {'' if eff is None else f'{eff:>9.0%}'}"
        )
    if record.get("note"):
        lines.append(f"  ({record['note']})")
    camp = record.get("campaign")
    if camp:
        util = camp["utilization"]
        lines += [
            "",
            f"campaign: {camp['trials']} one-GPU trials in {camp['wall_s']:.0f} s, states {camp.get('states')}",
        ]
        if util.get("samples"):
            for g, (mean, busy) in enumerate(zip(util["mean_percent"], util["busy_fraction"], strict=True)):
                lines.append(
                    f"  GPU {g}: mean utilization {mean:5.1f}%, busy in {busy:.0%} of {util['samples']} samples"
                )
        else:
            lines.append(f"  utilization: {util.get('error')}")
        if camp.get("error"):
            lines.append(f"  error: {camp['error']}")
    lines += _packing_lines(record)
    return "\n".join(lines)


def _packing_lines(record: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    pair = record.get("nccl_pair") or {}
    if pair:
        lines += [
            "",
            "two-rank NCCL trial: "
            + (
                pair["skipped"]
                if "skipped" in pair
                else f"{pair['examples_per_s']:.0f} examples/s at global batch {pair['global_batch']}"
            ),
        ]
    start = record.get("trial_start") or {}
    if start:
        lines += ["", "a trial's process on GPU 0, from launch (s): first line / first step on cuda:0"]
        if "error" in start:
            lines.append(f"  error: {start['error'][:300]}")
        for way in ("fresh", "pool", "pool_first"):
            if way in start:
                lines.append(f"  {way:<10} {start[way]['first_line_s']:.3f} / {start[way]['first_step_s']:.3f}")
    if record.get("packing"):
        lines += ["", "packing    trials  trials/hour  GPU busy  mean util  peak MiB"]
    for case in record.get("packing", []):
        util = case["utilization"]
        busy = sum(util.get("busy_fraction", [0])) / max(1, len(util.get("busy_fraction", [0])))
        mean = sum(util.get("mean_percent", [0])) / max(1, len(util.get("mean_percent", [0])))
        peak = case.get("peak_memory_mib")
        lines.append(
            f"  {case['per_gpu']} / GPU  {case['trials']:>6}  {case['trials_per_hour']:>11.0f}  {busy:>8.0%}"
            f"  {mean:>8.1f}%  {'' if peak is None else f'{peak:>8.0f}'}"
            + (f"  error: {case['error'][:200]}" if case.get("error") else "")
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON result file (default {DEFAULT_OUT})")
    parser.add_argument("--epochs", type=int, default=4, help="epochs of the throughput trials (default 4)")
    parser.add_argument("--quick", action="store_true", help="a smaller dataset (a smoke run, about a minute)")
    parser.add_argument("--no-campaign", action="store_true", help="measure the one-trial throughput only")
    parser.add_argument("--campaign-timeout", type=float, default=300.0, help="seconds (default 300)")
    args = parser.parse_args(argv)
    if args.epochs < 2:
        parser.error(f"--epochs={args.epochs}: needs >= 2 (the first epoch is warm-up and not timed)")
    n, why = _gpus()
    if n == 0:
        print(f"gpu_check: no GPU to check: {why}. Nothing measured; run this on a machine with CUDA GPUs.")
        return 0
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    record: dict[str, Any] = {"environment": _environment(), "throughput": []}
    one = throughput(1, args.epochs, args.quick)
    record["throughput"].append({**one, "efficiency": 1.0})
    if n > 1:
        all_gpus = throughput(n, args.epochs, args.quick)
        all_gpus["efficiency"] = all_gpus["examples_per_s"] / (n * one["examples_per_s"])
        record["throughput"].append(all_gpus)
    else:
        record["note"] = "one GPU: the data-parallel (all-GPU) trial was not run"
    record["nccl_pair"] = nccl_pair(n, args.epochs, args.quick)
    record["trial_start"] = trial_start()
    if not args.no_campaign:
        record["campaign"] = campaign(n, 2, args.quick, args.campaign_timeout)
        record["packing"] = packing(n, 2, args.quick, args.campaign_timeout)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(_table(record))
    print(f"\nwritten: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
