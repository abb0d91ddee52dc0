"""The sampler child modelled on virtual time: the real child's asks, its time on a core of its own."""

from __future__ import annotations

import time
from typing import Any

import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import TrialState

from search.sampling.process import ProcessAsker, ReplaySampler
from search.sampling.tpe import RefitTPESampler
from search.sampling.virtual_child import VirtualChildAsker

DISTS = {"x": FloatDistribution(0.0, 1.0), "k": IntDistribution(1, 8)}


class Core:
    """Records what the asker hands over; each piece of work is done one virtual second after the last."""

    def __init__(self) -> None:
        self.work: list[float] = []
        self.ready: dict[int, float] = {}

    def sampler_work(self, seconds: float) -> float:
        self.work.append(seconds)
        return float(len(self.work))

    def params_ready(self, number: int, at: float) -> None:
        self.ready[number] = at


def _run(study: optuna.Study, asker: Any, take: Any) -> list[dict[str, Any]]:
    """Ask 3, tell 2 (one pruned after a report), ask 4 more one at a time, telling each: the child's params."""
    first = [take(asker) for _ in range(3)]
    study.tell(first[0], 0.3)
    first[1].report(0.5, step=1)
    study.tell(first[1], state=TrialState.PRUNED)
    rest = []
    for value in (0.9, 0.1, 0.7, 0.4):
        trial = take(asker)
        rest.append(trial)
        study.tell(trial, value)
    study.tell(first[2], 0.2)
    return [t.params for t in first + rest]


def _take_process(asker: ProcessAsker) -> optuna.Trial:
    asker.want(1)
    deadline = time.monotonic() + 60.0
    while (item := asker.take()) is None:
        assert time.monotonic() < deadline, "the sampler process sent nothing"
        time.sleep(0.005)
    return item


def _tpe() -> RefitTPESampler:
    return RefitTPESampler(seed=5, n_startup_trials=2, multivariate=True, constant_liar=True)


@pytest.mark.timeout(120)
def test_it_asks_what_the_real_child_process_asks_and_its_time_goes_to_the_core() -> None:
    real = optuna.create_study(sampler=_tpe())
    process = ProcessAsker(real, DISTS, lambda saw: real.ask(fixed_distributions=DISTS), lambda: None)
    try:
        expected = _run(real, process, _take_process)
    finally:
        process.close()

    study, core = optuna.create_study(sampler=_tpe()), Core()
    asker = VirtualChildAsker(study, DISTS, lambda saw: study.ask(fixed_distributions=DISTS), lambda t: t.number, core)
    assert isinstance(study.sampler, ReplaySampler)
    got = _run(study, asker, lambda a: a.ask_here())
    asker.close()
    assert got == expected
    assert len({(p["x"], p["k"]) for p in got}) == 7
    # the child's start, 7 asks and 7 tells, in that order: each trial is ready when its ask is done
    assert len(core.work) == 1 + 7 + 7 and all(s > 0 for s in core.work)
    assert core.ready == {0: 2.0, 1: 3.0, 2: 4.0, 3: 7.0, 4: 9.0, 5: 11.0, 6: 13.0}
    assert isinstance(study.sampler, RefitTPESampler)  # the child's sampler, back with the campaign's study
