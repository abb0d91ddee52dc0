"""RegularizedEvolutionSampler: Optuna's sampler contract, determinism, pickling, aging,
asynchronous (out-of-order) completion with ask/tell, lineage; the asynchronous start
(mutating before a whole population has finished), no repeated genomes, the candidate
model, and the classic algorithm under its knobs."""

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
from scipy.stats import spearmanr

from search.sampling.evolution import (
    GENOME_ATTR,
    MUTATION_ATTR,
    PARENT_ATTR,
    RegularizedEvolutionSampler,
)
from search.sampling.samplers import make_sampler
from spaces.genomes import CELL_OPS, CellGenome, CellSpace, LayerSpace
from spaces.mutations import mutate_with_kind
from spaces.params import parse_space

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


class TestOptunaSamplerContract(BasicSamplerTestCase, RelativeSamplerTestCase, SingleOnlySamplerTestCase):
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
        ({"n_startup_trials": 0}, "n_startup_trials=0 must be an int >= 1"),
        ({"n_startup_trials": "soon"}, "n_startup_trials='soon' must be an int >= 1"),
        ({"candidates": 0}, "candidates=0 must be an int >= 1"),
        ({"skip_duplicates": "yes"}, "skip_duplicates='yes' must be a bool"),
    ],
)
def test_constructor_validates(kwargs: dict, reason: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=reason):
        RegularizedEvolutionSampler(CellSpace(), **kwargs)


def test_space_must_be_a_genome_space() -> None:
    with pytest.raises(ValueError, match="LayerSpace or a CellSpace"):
        RegularizedEvolutionSampler({"type": "cell"})  # type: ignore[arg-type]


# --------------------------------------------------------------------------- plain optimize


def test_default_knobs() -> None:
    sampler = RegularizedEvolutionSampler(CellSpace())
    assert (sampler.population_size, sampler.sample_size, sampler.n_startup_trials) == (20, 10, "auto")
    assert (sampler.candidates, sampler.skip_duplicates) == (16, True)
    assert RegularizedEvolutionSampler(CellSpace(), population_size=7).sample_size == 3
    assert RegularizedEvolutionSampler(CellSpace(), population_size=1).sample_size == 1
    registry = make_sampler("evolution", parse_space({"arch": {"type": "cell"}}), 0)
    assert isinstance(registry, RegularizedEvolutionSampler)
    assert (registry.n_startup_trials, registry.candidates, registry.skip_duplicates) == ("auto", 16, True)


def test_optimize_evolves_and_records_lineage() -> None:
    sampler = RegularizedEvolutionSampler(CellSpace(), population_size=10, sample_size=3, seed=1, n_startup_trials=10)
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
    return drive_async(sampler, n_trials, workers, order_seed=100)


def drive_async(sampler: RegularizedEvolutionSampler, n_trials: int, workers: int, order_seed: int) -> optuna.Study:
    """A maximising study of ``cell_fitness`` asked with ``workers`` trials in flight, each told at a
    seeded random moment (the order of an asynchronous cluster)."""
    study = optuna.create_study(direction="maximize", sampler=sampler)
    order = np.random.default_rng(order_seed)
    running: list[tuple[optuna.Trial, float]] = []
    asked = 0
    while asked < n_trials or running:
        while asked < n_trials and len(running) < workers:
            trial = study.ask()
            running.append((trial, cell_fitness(sampler.suggest(trial))))  # type: ignore[arg-type]
            asked += 1
        study.tell(*running.pop(int(order.integers(len(running)))))
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
    study.add_trial(
        optuna.trial.create_trial(
            params={"x": 1.0}, distributions={"x": optuna.distributions.FloatDistribution(0, 2)}, value=0.0
        )
    )
    good = CellGenome(("nor_conv_3x3",) * 6)
    study.add_trial(optuna.trial.create_trial(value=1.0, system_attrs={GENOME_ATTR: good.to_string()}))
    study.add_trial(
        optuna.trial.create_trial(
            params=space.encode(good, "arch"), distributions=space.distributions("arch"), value=2.0
        )
    )
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


# --------------------------------------------------------------------------- asynchronous start, repeats, model


def ask_genome(study: optuna.Study, sampler: RegularizedEvolutionSampler) -> tuple[optuna.Trial, CellGenome]:
    trial = study.ask()
    return trial, sampler.suggest(trial)  # type: ignore[return-value]


def lineage_of(study: optuna.Study, trial: optuna.Trial) -> tuple[object, object]:
    frozen = study._storage.get_trial(trial._trial_id)
    return frozen.system_attrs[PARENT_ATTR], frozen.system_attrs[MUTATION_ATTR]


def test_auto_startup_scales_with_trials_in_flight() -> None:
    sampler = RegularizedEvolutionSampler(CellSpace(), population_size=20)
    assert [sampler.startup_trials(n) for n in (0, 1, 15, 32, 33, 63, 64, 100, 1000)] == [4, 4, 4, 4, 5, 8, 8, 13, 20]
    fixed = RegularizedEvolutionSampler(CellSpace(), population_size=20, n_startup_trials=6)
    assert [fixed.startup_trials(n) for n in (0, 64, 1000)] == [6, 6, 6]


def test_starts_mutating_before_population_size_trials_finished_when_many_workers_are_busy() -> None:
    """64 trials in flight, population 20: the 9th finished trial is enough (auto: 8 on 64 workers)."""
    sampler = RegularizedEvolutionSampler(CellSpace(), population_size=20, seed=3)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    running = [ask_genome(study, sampler) for _ in range(64)]
    assert all(lineage_of(study, t) == (None, "random") for t, _ in running)
    values = {}
    for trial, genome in running[:7]:  # 7 finished, 57 running: still random (startup ceil(57 / 8) = 8)
        values[trial.number] = cell_fitness(genome)
        study.tell(trial, values[trial.number])
    trial, _ = ask_genome(study, sampler)
    assert lineage_of(study, trial) == (None, "random")
    for t, genome in running[7:9]:  # 9 finished, 55 + 1 running: startup 7, evolving
        values[t.number] = cell_fitness(genome)
        study.tell(t, values[t.number])
    child, child_genome = ask_genome(study, sampler)
    parent, kind = lineage_of(study, child)
    # the tournament takes min(sample_size=10, 9 finished): the parent is the best finished trial
    assert parent == max(values, key=values.__getitem__)
    assert kind in ("edge_op", "rewire")
    assert child_genome.to_string() not in {g.to_string() for _, g in running}


def test_classic_knobs_start_with_a_whole_random_population_on_many_workers() -> None:
    sampler = RegularizedEvolutionSampler(CellSpace(), population_size=20, seed=3, n_startup_trials=20)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    running = [ask_genome(study, sampler) for _ in range(64)]
    for trial, genome in running[:19]:
        study.tell(trial, cell_fitness(genome))
    assert lineage_of(study, ask_genome(study, sampler)[0]) == (None, "random")


def classic_reference(seed: int, n_trials: int, population: int, sample: int) -> list[str]:
    """The sampler's algorithm before issue 17, written out: serial, maximizing cell_fitness."""
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed).spawn(2)[0]))
    space = CellSpace()
    history: list[tuple[CellGenome, float]] = []
    for _ in range(n_trials):
        if len(history) < population:
            genome = space.sample(rng)
        else:
            window = history[-population:]
            picks = rng.choice(population, size=sample, replace=False)
            best = min(picks, key=lambda i: -window[i][1])
            genome = mutate_with_kind(window[int(best)][0], space, rng)[0]
        history.append((genome, cell_fitness(genome)))
    return [g.to_string() for g, _ in history]


def test_classic_knobs_reproduce_the_classic_algorithm_draw_for_draw() -> None:
    sampler = RegularizedEvolutionSampler(
        CellSpace(), population_size=8, sample_size=3, seed=7, n_startup_trials=8, candidates=1, skip_duplicates=False
    )
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(lambda t: cell_fitness(sampler.suggest(t)), n_trials=80)  # type: ignore[arg-type]
    assert genomes(study) == classic_reference(7, 80, 8, 3)


@pytest.mark.slow
def test_no_genome_is_proposed_twice() -> None:
    def run(**kwargs: object) -> list[str]:
        sampler = RegularizedEvolutionSampler(
            CellSpace(),
            population_size=10,
            seed=2,
            **kwargs,  # type: ignore[arg-type]
        )
        return genomes(drive_async(sampler, 300, workers=16, order_seed=0))

    assert len(set(run())) == 300  # a greedy climb on a small landscape, yet no repeat
    classic = run(n_startup_trials=10, sample_size=5, candidates=1, skip_duplicates=False)
    assert len(set(classic)) < 300  # the same climb without the check repeats genomes


def test_an_exhausted_neighbourhood_moves_two_mutations_away() -> None:
    space = CellSpace()
    parent = CellGenome(("nor_conv_3x3",) * 6)  # one op everywhere: no rewiring, 24 single mutants
    sampler = RegularizedEvolutionSampler(space, population_size=1, seed=0, n_startup_trials=1)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    dists = space.distributions("arch")
    study.add_trial(optuna.trial.create_trial(params=space.encode(parent, "arch"), distributions=dists, value=1.0))
    for edge in range(6):
        for op in CELL_OPS:
            if op != parent.edges[edge]:
                ops = list(parent.edges)
                ops[edge] = op
                study.add_trial(
                    optuna.trial.create_trial(  # failed trials count as taken too
                        params=space.encode(CellGenome(tuple(ops)), "arch"), distributions=dists, state=TrialState.FAIL
                    )
                )
    for _ in range(5):
        trial, child = ask_genome(study, sampler)
        assert lineage_of(study, trial)[0] == 0
        assert sum(a != b for a, b in zip(child.edges, parent.edges)) == 2
        study.tell(trial, state=TrialState.FAIL)


def test_repeats_are_accepted_when_nothing_new_is_left() -> None:
    space = LayerSpace(min_depth=1, max_depth=1, widths=(8,), kernels=(3,))  # a handful of genomes
    sampler = RegularizedEvolutionSampler(space, population_size=4, seed=0)
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: float(len(sampler.suggest(t).to_string())), n_trials=60)
    assert len(study.trials) == 60 and len(set(genomes(study))) < 60


@pytest.mark.slow
def test_the_candidate_model_steers_children_to_good_values() -> None:
    """On the additive cell_fitness, 16 rated candidates beat one blind mutation (same seeds, 16 workers)."""

    def mean_child_fitness(candidates: int) -> float:
        scores = []
        for seed in range(4):
            sampler = RegularizedEvolutionSampler(CellSpace(), seed=seed, candidates=candidates)
            study = drive_async(sampler, 80, workers=16, order_seed=seed)
            scores += [t.value for t in study.trials if t.system_attrs[PARENT_ATTR] is not None]
        return float(np.mean(scores))

    assert mean_child_fitness(16) > mean_child_fitness(1) + 0.5


def _rated_study(cells: list[CellGenome], values: list[float]) -> optuna.Study:
    """A maximising study with one COMPLETE trial per (cell, value), for the candidate model."""
    space = CellSpace()
    study = optuna.create_study(direction="maximize")
    for cell, value in zip(cells, values):
        study.add_trial(
            optuna.trial.create_trial(
                params=space.encode(cell, "arch"), distributions=space.distributions("arch"), value=value
            )
        )
    return study


def _candidate_model(sampler: RegularizedEvolutionSampler, study: optuna.Study) -> Callable[[CellGenome], float]:
    return sampler._model(sampler._finished(study), -1.0)  # the rating of mutants (maximize: sign -1)


def test_the_candidate_model_ranks_cells_from_twenty_results() -> None:
    """From 20 random cells, the model's rating of 300 new cells follows cell_fitness (Spearman > 0.7 on
    average; the earlier TPE-style frequency ratio reached 0.51)."""
    space, correlations = CellSpace(), []
    for seed in range(10):
        rng = np.random.default_rng(seed)
        cells = [space.sample(rng) for _ in range(20)]
        score = _candidate_model(
            RegularizedEvolutionSampler(space, seed=seed), _rated_study(cells, [cell_fitness(c) for c in cells])
        )
        new = [space.sample(rng) for _ in range(300)]
        correlations.append(spearmanr([score(c) for c in new], [cell_fitness(c) for c in new]).statistic)
    assert float(np.mean(correlations)) > 0.7


def test_the_candidate_model_reads_ranks_so_an_outlier_weighs_like_a_poor_trial() -> None:
    space, rng = CellSpace(), np.random.default_rng(0)
    cells = [space.sample(rng) for _ in range(12)]
    values = [cell_fitness(c) for c in cells]
    worst = int(np.argmin(values))
    diverged = [-1e9 if i == worst else v for i, v in enumerate(values)]
    sampler = RegularizedEvolutionSampler(space, seed=0)
    plain, outlier = (_candidate_model(sampler, _rated_study(cells, v)) for v in (values, diverged))
    new = [space.sample(rng) for _ in range(50)]
    assert [plain(c) for c in new] == pytest.approx([outlier(c) for c in new])
    assert len({round(plain(c), 9) for c in new}) > 10  # the ratings do discriminate


def test_unpickling_a_sampler_from_before_the_knobs_keeps_the_classic_algorithm() -> None:
    sampler = RegularizedEvolutionSampler(CellSpace(), population_size=6, sample_size=2, seed=0)
    state = sampler.__getstate__()
    for key in ("n_startup_trials", "candidates", "skip_duplicates", "_ended"):
        del state[key]
    old = RegularizedEvolutionSampler.__new__(RegularizedEvolutionSampler)
    old.__setstate__(pickle.loads(pickle.dumps(state)))
    assert (old.n_startup_trials, old.candidates, old.skip_duplicates) == (6, 1, False)
    study = optuna.create_study(sampler=old)
    study.optimize(lambda t: cell_fitness(old.suggest(t)), n_trials=10)  # type: ignore[arg-type]
    assert all(t.system_attrs[PARENT_ATTR] is None for t in study.trials[:6])


@pytest.mark.slow
def test_bench_evolution_runs_and_reports_rank_tests(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from bench import evolution as bench_evolution

    rows = bench_evolution.main(
        [
            "--seeds",
            "3",
            "--workers",
            "8",
            "--budgets",
            "12",
            "24",
            "--datasets",
            "cifar10",
            "--methods",
            "evolution",
            "random",
            "evolution-classic",
            "--out",
            str(tmp_path / "s.csv"),
            "--runs-out",
            str(tmp_path / "r.csv"),
        ]
    )
    assert [(r["workers"], r["budget"], r["seeds"]) for r in rows] == [(8, 12, 3), (8, 24, 3)]
    for row in rows:
        assert 0.0 <= row["p_val_vs_random"] <= 1.0 and 0.0 <= row["p_test_vs_evolution-classic"] <= 1.0
        assert row["evolution_val"] <= 100.0 and row["evolution_regret"] >= 0.0
    trials = bench_evolution.campaign("evolution", 8, 24, "cifar10", 0)
    assert trials[:12] == bench_evolution.campaign("evolution", 8, 12, "cifar10", 0)  # budget-independent prefix
