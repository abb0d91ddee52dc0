"""Coverage of the B_crit interval on synthetic sweeps with a known B_noise (issue 17, item 2).

    python -m bench.scaling_coverage [--sweeps 1000] [--boot 500] [--seed 0] [--quick]

Each scenario draws ``--sweeps`` seeded synthetic sweeps; every method is
applied to the same sweeps (a paired comparison). Columns: ``coverage`` (the
share of intervals containing the true B_noise; nominal 0.90) with its
Monte Carlo standard error, ``bias`` (median fitted B_crit / true),
``width`` (median high/low of the interval), ``open`` (share unbounded
above or below).

Scenarios:

- ``digits``: the full pipeline of :mod:`search.scaling.synthetic` (one
  report per epoch of 1,438 examples, 8 trials per batch size, the fastest
  kept, steps read by ``steps_to_target``), batch sizes 8..256, S_min = 100,
  B_noise = 64; steps interpolated between reports (the default) or counted
  at report granularity (``interpolate = false``, the former default).
- ``lognormal-n``: steps drawn directly as ``S(B) exp(0.1 z)`` at ``n`` batch
  sizes from 8 (S_min = 500, B_noise = 64), and at the edges of the range.

Results go to stdout and ``bench/results/scaling_coverage.csv``.
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from search.scaling.bootstrap import bootstrap_b_crit
from search.scaling.mccandlish import fit_mccandlish
from search.scaling.synthetic import SyntheticScaling, synthetic_sweep

RESULTS = Path(__file__).with_name("results")
METHODS = ("profile", "residual")
Draw = Callable[[np.random.Generator], tuple[list[float], list[float]]]


def _lognormal(sizes: list[int], s_min: float, b_noise: float, sigma: float) -> Draw:
    b = np.asarray(sizes, dtype=float)

    def draw(rng: np.random.Generator) -> tuple[list[float], list[float]]:
        return list(b), list(s_min * (1 + b_noise / b) * np.exp(sigma * rng.standard_normal(len(b))))

    return draw


def _pipeline(sizes: list[int], truth: SyntheticScaling, interpolate: bool) -> Draw:
    def draw(rng: np.random.Generator) -> tuple[list[float], list[float]]:
        b, s = synthetic_sweep(rng, sizes, truth, interpolate=interpolate)
        return [float(v) for v in b], s

    return draw


def scenarios() -> list[tuple[str, str, float, Draw]]:
    """``(scenario, steps counting, true B_noise, draw)``."""
    digits = SyntheticScaling()
    sizes6 = [8, 16, 32, 64, 128, 256]
    rows: list[tuple[str, str, float, Draw]] = [
        ("digits", "interpolated", digits.b_noise, _pipeline(sizes6, digits, True)),
        ("digits", "report", digits.b_noise, _pipeline(sizes6, digits, False)),
    ]
    for n in (4, 6, 8):
        rows.append((f"lognormal-{n}", "exact", 64.0, _lognormal([8 * 2**i for i in range(n)], 500.0, 64.0, 0.1)))
    rows.append(("lognormal-6-low", "exact", 16.0, _lognormal(sizes6, 500.0, 16.0, 0.1)))
    rows.append(("lognormal-6-high", "exact", 512.0, _lognormal(sizes6, 500.0, 512.0, 0.1)))
    return rows


def run(sweeps: int, boot: int, seed: int, ci: float = 0.9) -> list[dict[str, object]]:
    rows = []
    for k, (name, counting, truth, draw) in enumerate(scenarios()):
        data_rng = np.random.default_rng([seed, k])
        data = [draw(data_rng) for _ in range(sweeps)]
        bias = float(np.median([fit_mccandlish(b, s).b_crit / truth for b, s in data]))
        for m, method in enumerate(METHODS):
            boot_rng = np.random.default_rng([seed, k, m])
            start = time.perf_counter()
            intervals = [bootstrap_b_crit(b, s, n_boot=boot, seed=boot_rng, ci=ci, method=method) for b, s in data]
            seconds = time.perf_counter() - start
            covered = np.mean([low <= truth <= high for low, high in intervals])
            bounded = [(low, high) for low, high in intervals if low > 0 and math.isfinite(high)]
            rows.append(
                {
                    "scenario": name,
                    "steps": counting,
                    "method": method,
                    "sweeps": sweeps,
                    "coverage": round(float(covered), 3),
                    "mc_se": round(math.sqrt(ci * (1 - ci) / sweeps), 3),
                    "bias": round(bias, 3),
                    "width": round(float(np.median([h / lo for lo, h in bounded])), 2) if bounded else math.inf,
                    "open": round(1 - len(bounded) / sweeps, 3),
                    "ms_per_interval": round(1e3 * seconds / sweeps, 1),
                }
            )
            print("  ".join(f"{key}={value}" for key, value in rows[-1].items()), flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=1000)
    parser.add_argument("--boot", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="100 sweeps, 200 resamples")
    args = parser.parse_args(argv)
    sweeps, boot = (100, 200) if args.quick else (args.sweeps, args.boot)
    rows = run(sweeps, boot, args.seed)
    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / "scaling_coverage.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()
