"""A define-by-run suggestion's round trip on the embedded cluster (``search.optimize``), against plain Optuna.

One trial asks ``--suggestions`` suggestions (``suggest_float``, each a new name) and as many ``should_prune``
(a round trip with no sampling: the channel alone), timing each call inside the objective; the timings go to the
trial's folder (``trial.checkpoint_dir``). The same objective then runs under plain ``optuna.create_study().optimize``
in this process (suggestions sampled and stored in memory, no round trip). Prints the medians and 90th percentiles.

    python -m bench.objective_roundtrip [--suggestions 200] [--workers 1] [--sampler random|tpe]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

N = 200


def objective(trial: Any) -> float:
    suggest: list[float] = []
    prune: list[float] = []
    for i in range(N):
        t0 = time.perf_counter()
        trial.suggest_float(f"x{i}", 0.0, 1.0)
        t1 = time.perf_counter()
        trial.should_prune()
        t2 = time.perf_counter()
        suggest.append(t1 - t0)
        prune.append(t2 - t1)
    folder = getattr(trial, "checkpoint_dir", None)
    if folder is not None:
        (folder / "timings.json").write_text(json.dumps({"suggest": suggest, "should_prune": prune}))
    else:
        trial.set_user_attr("timings", {"suggest": suggest, "should_prune": prune})
    return 0.0


def _line(what: str, seconds: list[float]) -> str:
    ms = sorted(s * 1e3 for s in seconds)
    return (
        f"{what:<34} median {statistics.median(ms):7.3f} ms   p90 {ms[int(0.9 * (len(ms) - 1))]:7.3f} ms   n={len(ms)}"
    )


def main(argv: list[str] | None = None) -> None:
    global N
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suggestions", type=int, default=N)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--sampler", default="random", choices=("random", "tpe"))
    args = parser.parse_args(argv)
    N = args.suggestions

    import optuna

    import search

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory() as runs:
        started = time.perf_counter()
        result = search.optimize(
            objective, n_trials=1, sampler=args.sampler, runs_dir=runs, n_workers=args.workers, progress=False
        )
        wall = time.perf_counter() - started
        timings = json.loads((Path(result.folder) / "trials" / "0" / "timings.json").read_text())
    sampler = optuna.samplers.RandomSampler(seed=0) if args.sampler == "random" else optuna.samplers.TPESampler(seed=0)
    study = optuna.create_study(sampler=sampler)
    study.optimize(objective, n_trials=1)
    plain = study.trials[0].user_attrs["timings"]
    print(f"search.optimize, embedded cluster of {args.workers} worker(s), sampler {args.sampler}: {wall:.1f} s in all")
    print(_line("  suggest_float (round trip)", timings["suggest"]))
    print(_line("  should_prune (round trip)", timings["should_prune"]))
    print("plain Optuna, in process (in-memory storage):")
    print(_line("  suggest_float", plain["suggest"]))
    print(_line("  should_prune", plain["should_prune"]))


if __name__ == "__main__":
    main()
