"""The built-in ``random`` sampler draws what Optuna's ``RandomSampler`` draws with the same seed."""

from __future__ import annotations

import pickle

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from search.sampling.random_draws import RandomDraws
from search.sampling.samplers import make_sampler
from spaces.params import parse_space

SPACE = {
    "op": CategoricalDistribution(["none", "skip", "conv1", "conv3", "avg"]),
    "flag": CategoricalDistribution([True, False]),
    "maybe": CategoricalDistribution([None, 1, "two", 3.0]),
    "lr": FloatDistribution(1e-5, 1e-1, log=True),
    "momentum": FloatDistribution(0.0, 0.99),
    "dropout": FloatDistribution(0.0, 0.5, step=0.1),
    "width": IntDistribution(16, 512, log=True),
    "depth": IntDistribution(1, 8),
    "batch": IntDistribution(32, 256, step=32),
    "one": CategoricalDistribution(["only"]),
}


def asked(sampler: optuna.samplers.BaseSampler, n: int) -> list[dict]:
    study = optuna.create_study(sampler=sampler)
    out = []
    for i in range(n):
        trial = study.ask(fixed_distributions=SPACE)
        if i % 3 == 0:  # define-by-run parameters too, in another order
            trial.suggest_int("late", 0, 9)
            trial.suggest_categorical("late_op", ["a", "b", "c"])
        out.append(trial.params)
        study.tell(trial, 0.0)
    return out


def test_the_same_parameters_as_optunas_random_sampler_with_the_same_seed() -> None:
    mine, optunas = asked(RandomDraws(seed=7), 300), asked(optuna.samplers.RandomSampler(seed=7), 300)
    assert mine == optunas
    assert {type(v) for p in mine for v in p.values()} == {type(v) for p in optunas for v in p.values()}
    assert len({p["op"] for p in mine}) == 5 and len({p["maybe"] for p in mine}) == 4  # not a constant


def test_the_stream_goes_on_the_same_after_pickling() -> None:
    mine, optunas = RandomDraws(seed=3), optuna.samplers.RandomSampler(seed=3)
    asked(mine, 10), asked(optunas, 10)
    again = pickle.loads(pickle.dumps(mine))
    assert again._kept == {}  # the kept transforms are not pickled
    assert asked(again, 50) == asked(optunas, 50)


def test_the_built_in_random_sampler_is_this_one() -> None:
    space = parse_space({"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}})
    assert isinstance(make_sampler("random", space, 0), RandomDraws)


def test_equal_distributions_are_kept_per_object_without_comparing_them(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Six equal categoricals (a NAS-Bench-201 cell): keyed by value they would share one entry, and five lookups of
    six would compare choices one by one (Optuna's ``__eq__``)."""
    cell = {f"e{i}": CategoricalDistribution(["none", "skip", "conv1", "conv3", "avg"]) for i in range(6)}
    sampler = RandomDraws(seed=0)
    study = optuna.create_study(sampler=sampler)
    trial = study.ask()
    for name, d in cell.items():
        sampler.sample_independent(study, trial._cached_frozen_trial, name, d)
    compared = 0
    original = CategoricalDistribution.__eq__

    def counted(self, other):  # type: ignore[no-untyped-def]
        nonlocal compared
        compared += 1
        return original(self, other)

    monkeypatch.setattr(CategoricalDistribution, "__eq__", counted)
    for _ in range(10):
        for name, d in cell.items():
            sampler.sample_independent(study, trial._cached_frozen_trial, name, d)
    assert compared == 0 and len(sampler._kept) == 6
