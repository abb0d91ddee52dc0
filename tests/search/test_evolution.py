"""RegularizedEvolutionSampler: Optuna's sampler contract, determinism, pickling, aging,
asynchronous (out-of-order) completion with ask/tell, lineage."""

from __future__ import annotations

import pickle
from collections.abc import Callable

import numpy as np
import optuna
import pytest
from optuna.testing.pytest_samplers import (
    BasicSamplerTestCase,
    RelativeSamplerTestCase,
    SingleOnlySamplerTestCase,
)
from optuna.trial import TrialState

from search.sampling.evolution import (
    GENOME_ATTR,
    MUTATION_ATTR,
    PARENT_ATTR,
    RegularizedEvolutionSampler,
)
from spaces.genomes import CELL_OPS, CellGenome, CellSpace, LayerSpace

optuna.logging.set_verbosity(optuna.logging.WARNING)

# A cheap cell fitness with structure: conv ops score, 'none' on the last edge hurts.
_OP_SCORE = {"none": 0.0, "skip_connect": 0.3, "nor_conv_1x1": 0.6, "nor_conv_3x3": 1.0, "avg_pool_3x3": 0.2}


def cell_fitness(genome: CellGenome) -> float:
    score = sum(_OP_SCORE[op] * (i + 1) for i, op in enumerate(genome.edges))
    return score - (3.0 if genome.edges[5] == "none" else 0.0)


def make_objective(sampler: RegularizedEvolutionSampler) -> Callable[[optuna.Trial], float]:
    def objective(trial: optuna.Trial) -> float:
        genome = sampler.suggest(trial)
        lr = trial.suggest_float("lr", 1e-4, 1e-1, log=True)
        return cell_fitness(genome) + 0.01 * np.log10(lr)  # type: ignore[arg-type]

    return objective


def genomes(study: optuna.Study) -> list[str]:
    return [t.system_attrs[GENOME_ATTR] for t in study.trials]


# --------------------------------------------------------------------------- Optuna's contract


class TestOptunaSamplerContract(
    BasicSamplerTestCase, RelativeSamplerTestCase, SingleOnlySamplerTestCase
):
    """Optuna's own sampler test suites (non-architecture params go to the base sampler)."""

    @pytest.fixture
    def sampler(self) -> Callable[[], optuna.samplers.BaseSampler]:
        return lambda: RegularizedEvolutionSampler(CellSpace(), population_size=4, sample_size=2, seed=0)


# --------------------------------------------------------------------------- construction


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"population_size": 0}, "population_size=0 must be an int >= 1"),
        ({"sample_size": 0}, "sample_size=0 must be an int >= 1"),
        ({"population_size": 4, "sample_size": 5}, "sample_size=5 must be <= population_size=4"),
        ({"prefix": ""}, "prefix"),
        ({"base_sampler": "tpe"}, "base_sampler"),
    ],
)
def test_constructor_validates(kwargs: dict, reason: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=reason):
        RegularizedEvolutionSampler(CellSpace(), **kwargs)


def test_space_must_be_a_genome_space() -> None:
    with pytest.raises(ValueError, match="LayerSpace or a CellSpace"):
        RegularizedEvolutionSampler({"type": "cell"})  # type: ignore[arg-type]


# --------------------------------------------------------------------------- plain optimize


def test_optimize_evolves_and_records_lineage() -> None:
    sampler = RegularizedEvolutionSampler(CellSpace(), population_size=10, sample_size=3, seed=1)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(make_objective(sampler), n_trials=60)
    trials = study.trials
    assert len(trials) == 60 and all(t.state == TrialState.COMPLETE for t in trials)
    for t in trials:
        genome = CellGenome.from_string(t.system_attrs[GENOME_ATTR])
        assert CellSpace().decode(t.params, "arch") == genome
        assert isinstance(t.params["lr"], float)
    assert all(t.system_attrs[PARENT_ATTR] is None for t in trials[:10])
    assert all(t.system_attrs[MUTATION_ATTR] == "random" for t in trials[:10])
    for t in trials[10:]:
        parent = t.system_attrs[PARENT_ATTR]
        assert t.number - 10 <= parent < t.number  # from the 10 most recent
        assert t.system_attrs[MUTATION_ATTR] in ("edge_op", "rewire", "identity")
    assert sampler.lineage[59].genome == trials[59].system_attrs[GENOME_ATTR]
    first = max(t.value for t in trials[:10])  # type: ignore[type-var]
    assert study.best_value > first
    assert np.mean([t.value for t in trials[-20:]]) > np.mean([t.value for t in trials[:10]])


def test_layer_space_with_partial_suggestions() -> None:
    space = LayerSpace(max_depth=4, widths=(8, 16))
    sampler = RegularizedEvolutionSampler(space, prefix="net", population_size=8, sample_size=3, seed=0)

    def objective(trial: optuna.Trial) -> float:
        genome = sampler.suggest(trial)  # suggests only the blocks below the depth
        return float(sum(b.width for b in genome.blocks) + genome.depth)

    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(objective, n_trials=40)
    for t in study.trials:
        assert len(t.params) == 1 + 5 * t.params["net.depth"]
        space.validate(space.decode(t.params, "net"))
    assert study.best_value >= 50  # near the 4 x 16 + 4 = 68 optimum


def test_determinism_for_a_seed() -> None:
    def run(seed: int) -> list[tuple]:  # type: ignore[type-arg]
        sampler = RegularizedEvolutionSampler(CellSpace(), population_size=8, sample_size=3, seed=seed)
        study = optuna.create_study(sampler=sampler)
        study.optimize(make_objective(sampler), n_trials=40)
        return [tuple(sorted(t.params.items())) for t in study.trials]

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_pickle_continues_the_same_stream() -> None:
    sampler = RegularizedEvolutionSampler(CellSpace(), population_size=8, sample_size=3, seed=5)
    study = optuna.create_study(sampler=sampler)
    study.optimize(make_objective(sampler), n_trials=20)

    clone = pickle.loads(pickle.dumps(sampler))
    twin = optuna.create_study(sampler=clone)
    twin.add_trials(study.trials)
    study.optimize(make_objective(sampler), n_trials=20)
    twin.optimize(make_objective(clone), n_trials=20)
    assert [t.params for t in study.trials] == [t.params for t in twin.trials]
    assert genomes(study)[20:] == genomes(twin)[20:]


# --------------------------------------------------------------------------- asynchronous completion


def run_async(seed: int, workers: int = 4, n_trials: int = 60) -> optuna.Study:
    """ask/tell with ``workers`` trials in flight, told in a seeded random order."""
    sampler = RegularizedEvolutionSampler(CellSpace(), population_size=10, sample_size=4, seed=seed)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    order = np.random.default_rng(100)
    running: list[tuple[optuna.Trial, float]] = []
    asked = 0
    while asked < n_trials or running:
        while asked < n_trials and len(running) < workers:
            trial = study.ask()
            running.append((trial, cell_fitness(sampler.suggest(trial))))  # type: ignore[arg-type]
            asked += 1
        trial, value = running.pop(int(order.integers(len(running))))
        study.tell(trial, value)
    return study


def test_ask_tell_out_of_order() -> None:
    study = run_async(seed=11)
    by_number = {t.number: t for t in study.trials}
    assert all(t.state == TrialState.COMPLETE for t in study.trials)
    evolved = [t for t in study.trials if t.system_attrs[PARENT_ATTR] is not None]
    assert len(evolved) >= 40
    for t in evolved:  # a parent had completed before its child started
        parent = by_number[t.system_attrs[PARENT_ATTR]]
        assert parent.datetime_complete <= t.datetime_start  # type: ignore[operator]
    assert genomes(run_async(seed=11)) == genomes(study)  # same seed, same completion order


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_population_ages_by_completion_time(direction: str) -> None:
    sampler = RegularizedEvolutionSampler(CellSpace(), population_size=20, sample_size=20, seed=0)
    study = optuna.create_study(direction=direction, sampler=sampler)
    trials = [study.ask() for _ in range(25)]
    for trial in trials:
        sampler.suggest(trial)
    sign = 1.0 if direction == "maximize" else -1.0
    for trial in reversed(trials):  # trial 24 completes first, trial 0 last
        value = 100.0 if trial.number == 24 else float(trial.number)
        study.tell(trial, sign * value)
    # Window: the 20 latest completions = trials 19..0; trial 24 (best ever) has aged out,
    # and the whole-window tournament picks trial 19.
    child = study.ask()
    sampler.suggest(child)
    frozen = study._storage.get_trial(child._trial_id)
    assert frozen.system_attrs[PARENT_ATTR] == 19


def test_trials_without_genome_are_ignored_and_attrs_are_a_fallback() -> None:
    space = CellSpace()
    sampler = RegularizedEvolutionSampler(space, population_size=2, sample_size=2, seed=0)
    study = optuna.create_study(sampler=sampler)
    study.add_trial(optuna.trial.create_trial(params={"x": 1.0},
                    distributions={"x": optuna.distributions.FloatDistribution(0, 2)}, value=0.0))
    good = CellGenome(("nor_conv_3x3",) * 6)
    study.add_trial(optuna.trial.create_trial(value=1.0, system_attrs={GENOME_ATTR: good.to_string()}))
    study.add_trial(optuna.trial.create_trial(
        params=space.encode(good, "arch"), distributions=space.distributions("arch"), value=2.0))
    assert sampler.genome_of(study.trials[0]) is None
    assert sampler.genome_of(study.trials[1]) == good
    trial = study.ask()
    sampler.suggest(trial)
    assert study._storage.get_trial(trial._trial_id).system_attrs[PARENT_ATTR] == 1  # minimize


def test_multi_objective_is_refused() -> None:
    sampler = RegularizedEvolutionSampler(CellSpace(), seed=0)
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        sampler.suggest(trial)
        return 0.0, 0.0

    with pytest.raises(ValueError, match="single-objective"):
        study.optimize(objective, n_trials=1, catch=())


def test_parallel_threads_complete() -> None:
    sampler = RegularizedEvolutionSampler(CellSpace(), population_size=5, sample_size=2, seed=0)
    study = optuna.create_study(sampler=sampler)
    study.optimize(make_objective(sampler), n_trials=30, n_jobs=3)
    assert sum(t.state == TrialState.COMPLETE for t in study.trials) == 30
    assert all(op in CELL_OPS for t in study.trials for k, op in t.params.items() if k != "lr")
