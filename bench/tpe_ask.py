"""Time of one TPE ask on a large in-memory study: Optuna's TPESampler against the built-in ``tpe``.

    python -m bench.tpe_ask [--asks 400]

The study holds the NAS-Bench-201 space of ``bench.simulate`` (six 5-way categorical parameters), ``finished``
trials with seeded random values and ``running`` trials (the constant liar counts them); each row is the mean
time of ``study.ask`` over the given number of asks (Optuna's: a twentieth of them, it refits at every ask).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.trial import TrialState, create_trial

from search.sampling.tpe import RefitTPESampler

OPS = ["none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3"]
SPACE: dict[str, BaseDistribution] = {f"e{i}": CategoricalDistribution(OPS) for i in range(6)}
SIZES = ((1_000, 0), (10_000, 0), (10_000, 10_000), (40_000, 10_000))


def study_of(finished: int, running: int, sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    rng = np.random.default_rng(0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    trials = []
    for k in range(finished + running):
        params = {name: OPS[int(rng.integers(len(OPS)))] for name in SPACE}
        if k < finished:
            trials.append(create_trial(params=params, distributions=SPACE, value=float(rng.normal())))
        else:
            trials.append(create_trial(params=params, distributions=SPACE, state=TrialState.RUNNING))
    study.add_trials(trials)
    return study


def ask_ms(study: optuna.Study, asks: int) -> float:
    started = time.perf_counter()
    for _ in range(asks):
        study.ask(SPACE)
    return 1e3 * (time.perf_counter() - started) / asks


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tpe_ask", description=__doc__.splitlines()[0])
    parser.add_argument("--asks", type=int, default=400)
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    print(f"{'finished':>8} {'running':>8} {'optuna ms':>10} {'tpe ms':>8}")
    for finished, running in SIZES:
        theirs = ask_ms(study_of(finished, running, optuna.samplers.TPESampler(seed=0)), max(1, args.asks // 20))
        ours = ask_ms(study_of(finished, running, RefitTPESampler(seed=0)), args.asks)
        print(f"{finished:8} {running:8} {theirs:10.1f} {ours:8.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
