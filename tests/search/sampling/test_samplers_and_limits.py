"""Every sampler and pruner name works; time limits stop trials cleanly; oversized genomes never reach a worker."""

from __future__ import annotations

import tomllib
from pathlib import Path

import optuna
import pytest
from toy_specs import toy_toml

from search.sampling.pruning import make_pruner
from search.sampling.samplers import make_sampler
from search.session.runner import RunOptions, run_campaign
from search.spec.campaign_spec import PRUNERS, SAMPLERS, PrunerSpec, parse_spec
from spaces import parse_space
from tests.campaign_storage import load

SPACE = {
    "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
    "width": {"type": "int", "low": 8, "high": 64, "step": 8},
    "act": {"type": "categorical", "choices": ["relu", "tanh"]},
}
GRID = {
    "width": {"type": "int", "low": 8, "high": 32, "step": 8},
    "act": {"type": "categorical", "choices": ["a", "b"]},
}


@pytest.mark.parametrize("name", [s for s in SAMPLERS if s != "evolution"])
def test_every_sampler_name_asks_and_tells_seeded(name: str) -> None:
    space = parse_space(GRID if name == "grid" else SPACE)
    directions = ["maximize", "minimize"] if name == "nsga2" else ["maximize"]

    def run() -> list[dict]:
        study = optuna.create_study(sampler=make_sampler(name, space, 7), directions=directions)
        for _ in range(12):
            trial = study.ask(space.distributions())
            values = [len(str(trial.params))] * len(directions)
            study.tell(trial, values if len(values) > 1 else values[0])
        return [t.params for t in study.trials]

    first = run()
    assert len(first) == 12 and all(set(p) == set(space.distributions()) for p in first)
    if name != "gp":  # GP's acquisition optimiser is seeded too, but spends most of a test's time
        assert run() == first  # the same study seed gives the same trials


@pytest.mark.parametrize("name", PRUNERS)
def test_every_pruner_name_builds(name: str) -> None:
    pruner = make_pruner(name, PrunerSpec(min_resource=100), first_resource=100)
    assert isinstance(pruner, optuna.pruners.BasePruner)


def limited(**limit: float) -> str:
    """2 toy trials of 40 epochs of 0.2 s on 2 workers, with a ``[study]`` time limit."""
    space = {"quality": {"type": "float", "low": 0.1, "high": 1.0}}
    options = {"sleep": 0.2}
    return toy_toml("limits", epochs=40, trainer={"options": options}, space=space, cluster={"n_workers": 2}, **limit)


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("limit", "reason"),
    [({"trial_timeout": 1.5}, "trial timeout"), ({"time_budget": 2}, "time budget")],
    ids=["trial_timeout", "time_budget"],
)
def test_time_limits_stop_trials_cleanly_as_pruned(tmp_path: Path, limit: dict[str, float], reason: str) -> None:
    text = limited(**limit)
    spec = parse_spec(tomllib.loads(text), "limits.toml", text)
    folder = run_campaign(spec, RunOptions(runs_dir=tmp_path, progress=False))
    trials = load(folder.root, "limits").get_trials()
    assert trials and all(t.state == optuna.trial.TrialState.PRUNED for t in trials)
    assert all(t.user_attrs["stop_reason"] == reason for t in trials)
    assert all(len(t.user_attrs["history"]) < 40 for t in trials)  # stopped long before their 40 epochs


EVOLUTION = """
[study]
name = "evo"
direction = "maximize"
metric = "val_accuracy"
sampler = "evolution"
seed = 1
n_trials = 4

[trainer]
entry = "trainers.classifier:fit"
epochs = 1

[space]
arch = {{ type = "layers", max_depth = 3, widths = [8, 16], max_params = {max_params} }}
optimizer = "adam"
lr = 0.01
"""


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_an_evolution_campaign_runs_with_real_training_and_records_genomes(tmp_path: Path) -> None:
    text = EVOLUTION.format(max_params=100000)
    spec = parse_spec(tomllib.loads(text), "evo.toml", text)
    folder = run_campaign(spec, RunOptions(runs_dir=tmp_path, n_workers=2, progress=False))
    trials = load(folder.root, "evo").get_trials()
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert all(t.user_attrs["config"]["params"]["arch"].count(":") >= 4 for t in trials)  # the genome string
    assert all(t.user_attrs["n_params"] > 0 and t.user_attrs["macs"] > 0 for t in trials)
    assert all("evolution:genome" in t.system_attrs for t in trials)


def test_a_genome_over_its_parameter_limit_fails_before_it_reaches_a_worker(tmp_path: Path) -> None:
    from search.loop.campaign import Campaign
    from search.session.runner import load_study
    from search.store.folder import CampaignFolder

    text = EVOLUTION.format(max_params=200).replace('sampler = "evolution"', 'sampler = "random"')
    spec = parse_spec(tomllib.loads(text), "evo.toml", text)
    folder = CampaignFolder(tmp_path / "evo")
    folder.create(text)
    study = load_study(spec, folder, create=True)
    big = {
        "arch.depth": 3,
        **{
            f"arch.b{i}.{k}": v
            for i in range(3)
            for k, v in (("op", "conv"), ("width", 16), ("kernel", 5), ("activation", "relu"), ("skip", False))
        },
    }
    study.enqueue_trial(big)

    class NoWorkers:
        submitted: list[int] = []
        virtual_time = False

        def submit(self, request) -> None:  # type: ignore[no-untyped-def]
            self.submitted.append(request.number)

        def predict_with(self, costs) -> None:  # type: ignore[no-untyped-def]
            """The campaign hands its trial model over: nothing here predicts."""

    campaign = Campaign(spec, folder, study, NoWorkers())  # type: ignore[arg-type]
    group = campaign._next_group(1)
    assert NoWorkers.submitted == []
    rejected = study.trials[0]
    assert rejected.state == optuna.trial.TrialState.FAIL
    assert "max_params=200" in rejected.user_attrs["fail_reason"]
    assert all(prepared.trial.number != rejected.number for prepared in group)


# --- the one sampler registry -----------------------------------------------------------------------------------


def test_the_registry_is_what_the_spec_and_make_sampler_read() -> None:
    from search.sampling import samplers as registry
    from search.spec import campaign_spec

    assert SAMPLERS == tuple(registry.SAMPLER_REGISTRY) == registry.SAMPLERS
    assert campaign_spec.REPLICA_SAFE == registry.REPLICA_SAFE == ("tpe", "gp", "cost_tpe")
    assert campaign_spec.sampling_problem is registry.sampling_problem
    assert all(info.name == name for name, info in registry.SAMPLER_REGISTRY.items())
    with pytest.raises(ValueError, match="'tpee' is not one of tpe, random"):
        make_sampler("tpee", parse_space(SPACE), 1)
    assert registry.sampling_problem("process", "random", ordered=False).startswith("'process' runs only tpe, gp")
    assert registry.sampling_problem("process", "gp", ordered=False) == ""
    assert registry.space_problem("tpe", parse_space(SPACE), 1) is None
    assert registry.space_problem("grid", parse_space(SPACE), 1) == (
        "space.lr",
        "the grid sampler needs discrete parameters (int, categorical, batch_size); this one is continuous",
    )


@pytest.mark.parametrize(
    ("sampler", "space", "key", "fragment"),
    [
        ("grid", 'lr = { type = "float", low = 0.001, high = 0.1 }', "space.lr", "needs discrete parameters"),
        ("evolution", 'lr = { type = "float", low = 0.001, high = 0.1 }', "study.sampler", "exactly one architecture"),
    ],
)
def test_a_samplers_space_check_is_a_spec_error(sampler: str, space: str, key: str, fragment: str) -> None:
    from search.spec.campaign_spec import SpecError

    text = EVOLUTION.format(max_params=1000).replace('sampler = "evolution"', f'sampler = "{sampler}"')
    text = text.replace(text[text.index("[space]") :], f"[space]\n{space}\n")
    with pytest.raises(SpecError) as info:
        parse_spec(tomllib.loads(text), "s.toml", text, check_trainer=False)
    assert info.value.key == key and fragment in str(info.value)
