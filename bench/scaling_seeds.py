"""Scaling sweeps side by side (seeds, lr_scaling rules): B_crit with its interval, B_simple, their ratio, the
fitted learning-rate exponent, and whether the B_crit intervals overlap; the exponent across sweeps with its t
interval (the spread between seeds, not only each sweep's own).

    python -m bench.scaling_seeds runs/mnist1d-scaling runs/mnist1d-scaling-linear ...

Each folder is a finished sweep; the figures are the ones its ``scaling/conclusion.txt`` states, refitted from
its study with the same functions (``search.scaling.sweep``) and the same seeds.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from scipy import stats

from search.sampling.seeds import component_seed
from search.scaling.fit import bootstrap_b_crit, fit_mccandlish, lr_rule_fit, reached_points, scaling_table
from search.scaling.noise_check import noise_prediction
from search.scaling.outcomes import goal_of
from search.scaling.sweep import CI, _noise_histories, _outcomes
from search.session.runner import load_study
from search.spec.campaign_spec import CampaignSpec, load_spec
from search.store.folder import CampaignFolder


def sweep_row(path: Path) -> dict[str, object]:
    """One sweep's figures."""
    folder = CampaignFolder(path.resolve())
    spec = load_spec(folder.spec, check_trainer=False)
    study = load_study(spec, folder, False, writer=False)
    goal = goal_of(spec)
    assert spec.scaling is not None and goal is not None
    table = scaling_table(_outcomes(study, goal), spec.scaling.batch_sizes)
    sizes, steps = reached_points(table)
    fit = fit_mccandlish(sizes, steps)
    interval = bootstrap_b_crit(
        sizes, steps, n_boot=spec.scaling.bootstrap, seed=component_seed(spec.study.seed, "bootstrap"), ci=CI
    )
    lrs = table[table["status"] == "reached"]["best_lr"].astype(float).tolist()
    rule = lr_rule_fit(sizes, lrs)
    best = {int(r.batch_size): int(r.best_trial) for r in table.itertuples() if r.status == "reached"}
    noise = noise_prediction(_noise_histories(study, best), fit.b_crit, interval, ci=CI)
    return {
        "sweep": spec.study.name,
        "seed": spec.study.seed,
        "rule": _rule(spec),
        "trials": len(study.get_trials(deepcopy=False)),
        "b_crit": fit.b_crit,
        "b_crit_interval": interval,
        "b_simple": noise.b_simple if noise else math.nan,
        "b_simple_interval": noise.b_simple_interval if noise else (math.nan, math.nan),
        "ratio": noise.ratio if noise else math.nan,
        "alpha": rule.alpha,
        "alpha_interval": rule.alpha_interval(CI),
    }


def _rule(spec: CampaignSpec) -> str:
    for param in spec.space.params:
        if param.name == "lr_scaling":
            return str(getattr(param, "value", ""))
    return "none"


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two intervals share a point."""
    return max(a[0], b[0]) <= min(a[1], b[1])


def _across(alphas: Sequence[float]) -> str:
    if len(alphas) < 2:
        return "one sweep: no across-sweep interval"
    mean, sd = statistics.fmean(alphas), statistics.stdev(alphas)
    half = float(stats.t.ppf(0.5 + CI / 2, len(alphas) - 1)) * sd / math.sqrt(len(alphas))
    return (
        f"exponent across {len(alphas)} sweeps: {mean:.2f} ({CI:.0%} t interval {mean - half:.2f} to {mean + half:.2f})"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args(argv)
    rows = [sweep_row(p) for p in args.folders]
    print("| sweep | seed | rule | trials | B_crit (90%) | B_simple (90%) | ratio | exponent (90%) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        lo, hi = r["b_crit_interval"]  # type: ignore[misc]
        s_lo, s_hi = r["b_simple_interval"]  # type: ignore[misc]
        a_lo, a_hi = r["alpha_interval"]  # type: ignore[misc]
        print(
            f"| {r['sweep']} | {r['seed']} | {r['rule']} | {r['trials']} | {r['b_crit']:,.0f} ({lo:,.0f}–{hi:,.0f}) "
            f"| {r['b_simple']:,.0f} ({s_lo:,.0f}–{s_hi:,.0f}) | {r['ratio']:.2f} | {r['alpha']:.2f} "
            f"({a_lo:.2f} to {a_hi:.2f}) |"
        )
    intervals = [r["b_crit_interval"] for r in rows]
    every = all(overlap(a, b) for a in intervals for b in intervals)  # type: ignore[arg-type]
    print(f"B_crit intervals all overlap: {every}")
    print(_across([float(r["alpha"]) for r in rows]))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
