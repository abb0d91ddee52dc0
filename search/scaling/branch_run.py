"""Runs a branching study on a Dask cluster: the reference run, its branches, the scheduled run; writes the results.

The reference trial runs in segments that end at the study's points (each resumes its own checkpoint, so the
run is the same as one without stops) and its checkpoint at each point is kept. A branch is a trial whose
checkpoint folder starts with a copy of that checkpoint and whose segment overrides the batch size and the
learning rate (``TrialConfig.base_params`` are the reference's, so the checkpoint is its own); it trains
``branch_epochs`` more epochs: every branch sees the same examples. The scheduled run trains from scratch
with the batch-size schedule (a segment per change, each at the rate its batch was tuned to at that point);
the reference is the fixed-batch run it is compared with: steps and examples to the target; so is a run at
the schedule's last batch and rate from the start (does the warm-up matter, or only the larger batch?).

Files under ``out``: ``branches.csv`` (every branch), ``critical.csv`` (per point: the critical batch size,
the reference's noise scale there, the batches whose tuned rate is at an end of the grid, each batch's tuned loss), ``summary.json``.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from search.scaling.branching import (
    Branch,
    BranchingSpec,
    at_grid_edge,
    batch_schedule,
    best_per_batch,
    critical_batch,
    widening,
)
from search.scaling.target import steps_to_target
from trainers.api import TrialConfig

__all__ = ["run_reports", "BranchingResult", "run_branching", "write_branching"]

CHECKPOINT_NAME = "checkpoint.pt"  # trainers.loop.CHECKPOINT_NAME (search imports no trainers at import time)
Reports = list[tuple[int, dict[str, float]]]
Submit = Callable[[Sequence[TrialConfig]], list[Reports]]  # runs configs (at once where it can), their reports


def run_reports(entry: str, config: TrialConfig) -> Reports:
    """Run one trial (segment) here and return its reports (what a Dask worker runs)."""
    from trainers.api import RecordingReporter, load_trainer

    reporter = RecordingReporter()
    load_trainer(entry)(config, reporter)
    return reporter.reports


def dask_submit(client: Any, entry: str) -> Submit:
    """A :data:`Submit` that runs each config as a task on ``client``'s workers, all at once."""

    def submit(configs: Sequence[TrialConfig]) -> list[Reports]:
        futures = [client.submit(run_reports, entry, c, pure=False) for c in configs]
        return list(client.gather(futures))

    return submit


@dataclasses.dataclass(frozen=True)
class BranchingResult:
    """What a branching study measured."""

    branches: tuple[Branch, ...]
    critical: dict[int, int]  # point -> critical batch size
    noise_scale: dict[int, float]  # point -> the reference's b_simple there (NaN: not measured)
    schedule: list[tuple[int, int, float]]  # (from epoch, batch, lr)
    fixed: dict[str, float]  # the reference (fixed batch): steps, examples to the target (NaN: not reached), final_*
    scheduled: dict[str, float]  # the scheduled run: the same
    fixed_last: dict[str, float]  # a run at the schedule's last batch and rate from the start: the same


def _config(base: TrialConfig, folder: Path, epochs: int, overrides: Mapping[str, Any], number: int) -> TrialConfig:
    return dataclasses.replace(
        base,
        number=number,
        epochs=epochs,
        checkpoint_dir=str(folder),
        params={**base.params, **overrides},
        base_params=dict(base.params) if overrides else {},
    )


def _metric_at(reports: Reports, epoch: int, name: str) -> float:
    for _, m in reports:
        if int(m.get("epoch", -1)) == epoch and name in m:
            return float(m[name])
    return math.nan


def _copy_once(source: Path, to: Path) -> None:
    """``source`` copied to ``to`` unless ``to`` is there: a resumed study keeps the point it kept (the reference's
    folder has moved on since) and a branch's progress (its own checkpoint resumes it)."""
    if to.exists():
        return
    to.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, to.with_suffix(".part"))
    to.with_suffix(".part").replace(to)


def _run_reference(spec: BranchingSpec, base: TrialConfig, out: Path, submit: Submit) -> Reports:
    """The reference in segments ending at the points (each point's checkpoint kept), then to ``epochs``."""
    folder = out / "reference"
    reports: Reports = []
    for end in (*spec.points, spec.epochs):
        reports = submit([_config(base, folder, end, {}, 0)])[0]
        if end in spec.points:
            _copy_once(folder / CHECKPOINT_NAME, out / "points" / str(end) / CHECKPOINT_NAME)
    return reports


def _branch_plan(spec: BranchingSpec, base: TrialConfig) -> list[tuple[int, int, float, float]]:
    lr = float(base.params["lr"])
    return [(p, b, f, spec.branch_lr(lr, b, f)) for p in spec.points for b in spec.batch_sizes for f in spec.lr_factors]


def _run_plan(
    spec: BranchingSpec, base: TrialConfig, plan: list[tuple[int, int, float, float]], out: Path, submit: Submit
) -> list[Branch]:
    configs = []
    for i, (p, b, f, lr) in enumerate(plan):
        folder = out / "branches" / f"p{p}-b{b}-f{f:g}"
        _copy_once(out / "points" / str(p) / CHECKPOINT_NAME, folder / CHECKPOINT_NAME)
        overrides = {"batch_size": b, "lr": lr, "lr_scaling": "none"}
        configs.append(_config(base, folder, p + spec.branch_epochs, overrides, i + 1))
    end = [p + spec.branch_epochs for p, *_ in plan]
    return [
        Branch(p, b, f, lr, _metric_at(r, e, "val_loss"), _metric_at(r, e, "val_accuracy"))
        for (p, b, f, lr), r, e in zip(plan, submit(configs), end)
    ]


def _run_branches(spec: BranchingSpec, base: TrialConfig, out: Path, submit: Submit) -> list[Branch]:
    """The grid's branches, then up to ``spec.widen`` rounds one rate beyond each tuned rate at a grid's end."""
    branches = _run_plan(spec, base, _branch_plan(spec, base), out, submit)
    lr = float(base.params["lr"])
    for _ in range(spec.widen):
        more = [(p, b, f, spec.branch_lr(lr, b, f)) for p, b, f in widening(branches, spec.points)]
        if not more:
            break
        branches += _run_plan(spec, base, more, out, submit)
    return branches


def _run_scheduled(
    spec: BranchingSpec, base: TrialConfig, schedule: list[tuple[int, int, float]], folder: Path, submit: Submit
) -> Reports:
    """From scratch in ``folder``, a segment per schedule entry at its batch and rate, each resuming the last."""
    reports: Reports = []
    ends = [start for start, _, _ in schedule[1:]] + [spec.epochs]
    for (_, batch, lr), end in zip(schedule, ends):
        overrides = {"batch_size": batch, "lr": lr, "lr_scaling": "none"}
        reports = submit([_config(base, folder, end, overrides, 10_000)])[0]
    return reports


def _to_target(reports: Reports, metric: str, target: float, mode: str) -> dict[str, float]:
    """Steps and examples to the target (NaN: not reached), and the run's last steps, examples, loss, accuracy."""
    last = reports[-1][1] if reports else {}
    final = {f"final_{k}": float(last.get(k, math.nan)) for k in ("steps", "examples", "val_loss", "val_accuracy")}
    hit = steps_to_target(reports, metric, target, "max" if mode == "max" else "min", interpolate=False)
    if hit is None:
        return {"steps": math.nan, "examples": math.nan, **final}
    examples = float(hit.examples if hit.examples is not None else math.nan)
    return {"steps": float(hit.steps), "examples": examples, **final}


def run_branching(
    spec: BranchingSpec,
    base: TrialConfig,
    out: Path,
    submit: Submit,
    target: tuple[str, float, str] = ("val_accuracy", 0.95, "max"),
) -> BranchingResult:
    """Run the study: ``base`` is the reference trial (its ``params`` at ``spec.reference_batch``, a constant
    learning rate); ``target`` is (metric, value, "max" or "min") for steps and examples to the target."""
    if base.params.get("batch_size") != spec.reference_batch:
        raise ValueError(
            f"branching: the reference's batch_size={base.params.get('batch_size')!r} is not "
            f"reference_batch={spec.reference_batch}"
        )
    if base.params.get("schedule", "constant") != "constant" or float(base.params.get("warmup", 0.0)) != 0.0:
        raise ValueError("branching: the reference needs schedule = 'constant' and no warmup (branches change batch)")
    reference = _run_reference(spec, base, out, submit)
    branches = _run_branches(spec, base, out, submit)
    best = {p: best_per_batch(branches, p) for p in spec.points}
    critical = {p: critical_batch({b: x.val_loss for b, x in best[p].items()}, spec.epsilon) for p in spec.points}
    steps = batch_schedule(spec.points, [critical[p] for p in spec.points], spec.reference_batch)
    lr0 = float(base.params["lr"])
    schedule = [(e, b, best[e][b].lr if e in best and b in best[e] else lr0) for e, b in steps]
    if len(schedule) == 1:  # the batch never grows: the scheduled run, and the last batch's, are the reference
        scheduled = fixed_last = reference
    else:
        scheduled = _run_scheduled(spec, base, schedule, out / "scheduled", submit)
        last = schedule[-1]
        fixed_last = _run_scheduled(spec, base, [(0, last[1], last[2])], out / "fixed-last", submit)
    metric, value, mode = target
    return BranchingResult(
        branches=tuple(branches),
        critical=critical,
        noise_scale={p: _metric_at(reference, p, "b_simple") for p in spec.points},
        schedule=schedule,
        fixed=_to_target(reference, metric, value, mode),
        scheduled=_to_target(scheduled, metric, value, mode),
        fixed_last=_to_target(fixed_last, metric, value, mode),
    )


def write_branching(result: BranchingResult, spec: BranchingSpec, out: Path) -> None:
    """``branches.csv``, ``critical.csv`` and ``summary.json`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "branches.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["point", "batch_size", "lr_factor", "lr", "val_loss", "val_accuracy"])
        for b in result.branches:
            w.writerow([b.point, b.batch_size, f"{b.factor:g}", f"{b.lr:.6g}", f"{b.val_loss:.6g}", b.val_accuracy])
    with open(out / "critical.csv", "w", newline="") as f:
        w = csv.writer(f)
        header = ["point", "critical_batch", "b_simple", "rate_at_grid_edge", *(f"loss_b{b}" for b in spec.batch_sizes)]
        w.writerow(header)
        for p in spec.points:
            best = best_per_batch(result.branches, p)
            losses = [f"{best[b].val_loss:.6g}" if b in best else "" for b in spec.batch_sizes]
            edge = " ".join(str(b) for b in at_grid_edge(result.branches, p))
            w.writerow([p, result.critical[p], f"{result.noise_scale[p]:.4g}", edge, *losses])
    summary = {
        "critical": {str(p): c for p, c in result.critical.items()},
        "b_simple": {str(p): v for p, v in result.noise_scale.items()},
        "schedule": [{"from_epoch": e, "batch_size": b, "lr": lr} for e, b, lr in result.schedule],
        "fixed": result.fixed,
        "scheduled": result.scheduled,
        "fixed_last": result.fixed_last,
        "epsilon": spec.epsilon,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, allow_nan=True) + "\n")
