"""Bring your own sampler and pruner: a class the spec names, an Optuna object from Python, rebuilt on resume.

Real campaigns (an embedded LocalCluster, journal storage) with the toy trainer; Optuna's own sampler
contract suite (``optuna.testing.pytest_samplers``) runs against a user sampler built the way the
controller builds it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.testing.pytest_samplers import BasicSamplerTestCase
from toy_specs import toy_spec
from user_components import LowerHalfSampler  # as the spec names it (tests/search is on the path)

import search
from search.sampling import components
from search.sampling.samplers import SAMPLER_REGISTRY, make_sampler, sampler_info
from search.spec.campaign_spec import parse_spec
from search.spec.table import SpecError
from spaces.params import parse_space

ENTRY = "user_components:LowerHalfSampler"


def spec(name: str, n_trials: int = 4, **study: Any) -> dict[str, Any]:
    return toy_spec(name, n_trials, **{"sampler": "tpe", "seed": 5, **study})


def qualities(result: search.Result) -> list[float]:
    return [float(t.params["quality"]) for t in result.study.get_trials(deepcopy=False)]


@pytest.fixture(autouse=True)
def _no_registered_objects() -> None:
    components._OBJECTS.clear()


# --- the spec ---------------------------------------------------------------------------------------


def test_a_spec_names_a_sampler_class_with_keyword_arguments() -> None:
    data = {**spec("named", sampler=ENTRY), "sampler": {"fraction": 0.25}}
    campaign = parse_spec(data, "s.toml")
    assert campaign.study.sampler == ENTRY and campaign.sampler_options == {"fraction": 0.25}
    sampler = make_sampler(ENTRY, campaign.space, 7, campaign.sampler_options)
    assert isinstance(sampler, LowerHalfSampler) and sampler.fraction == 0.25
    assert sampler.seed is not None  # seeded from the study seed, as the built-in samplers are


def test_builtin_samplers_take_keyword_arguments_too() -> None:
    campaign = parse_spec({**spec("tpe-args", sampler="tpe"), "sampler": {"n_startup_trials": 3}}, "s.toml")
    assert make_sampler("tpe", campaign.space, 0, campaign.sampler_options)._n_startup_trials == 3


@pytest.mark.parametrize(
    ("data", "key", "words"),
    [
        ({"sampler": "user_components:Missing"}, "study.sampler", "has no 'Missing'"),
        ({"sampler": "no_such_module:Sampler"}, "study.sampler", "cannot import"),
        ({"sampler": "bad entry:X"}, "study.sampler", "package.module:Class"),
        ({"sampler": "tpe", "options": {"no_such_arg": 1}}, "sampler", "no_such_arg"),
        ({"sampler": ENTRY, "options": {"fraction": 2.0}}, "sampler", "fraction=2.0: must be in (0, 1]"),
        ({"pruner": "user_components:StopBelow"}, "study.pruner", "threshold"),
    ],
)
def test_a_wrong_class_or_argument_is_one_line_naming_the_key(data: dict, key: str, words: str) -> None:
    study = {k: v for k, v in data.items() if k != "options"}
    doc = spec("bad", **study)
    if "options" in data:
        doc["sampler"] = data["options"]
    with pytest.raises(SpecError) as caught:
        parse_spec(doc, "s.toml")
    assert caught.value.key == key and words in caught.value.problem
    assert "\n" not in str(caught.value)


def test_one_registry_names_every_sampler_and_says_where_it_runs() -> None:
    assert set(SAMPLER_REGISTRY) >= {"tpe", "random", "gp", "grid", "evolution"}
    assert sampler_info(ENTRY).replica_safe  # a user class: in a child process if it pickles
    assert not sampler_info("cmaes").replica_safe


# --- Optuna's sampler contract, against the sampler the controller builds -----------------------------


class TestUserSamplerContract(BasicSamplerTestCase):
    @pytest.fixture
    def sampler(self):  # noqa: ANN201 - the suite's fixture
        space = parse_space({"x": {"type": "float", "low": 0.0, "high": 1.0}})
        return lambda: make_sampler(ENTRY, space, 11, {"fraction": 0.5})


# --- real campaigns ----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_named_sampler_class_runs_a_campaign_and_is_rebuilt_on_resume(tmp_path: Path, subprocess_env) -> None:
    data = {**spec("user-class", sampler=ENTRY), "sampler": {"fraction": 0.2}}
    result = search.run(data, runs_dir=tmp_path, progress=False)
    assert len(qualities(result)) == 4 and all(q <= 0.2 for q in qualities(result))
    frozen = (result.folder / "spec.toml").read_text()
    assert ENTRY in frozen and "fraction = 0.2" in frozen
    done = subprocess.run(
        [sys.executable, "-m", "search", "resume", str(result.folder), "--n-trials", "7"],
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    again = search.load(result.folder)
    assert len(qualities(again)) == 7 and all(q <= 0.2 for q in qualities(again))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_optuna_object_from_python_is_frozen_kept_and_rebuilt_by_the_cli_resume(
    tmp_path: Path, subprocess_env
) -> None:
    sampler = optuna.samplers.PartialFixedSampler({"quality": 0.375}, optuna.samplers.RandomSampler(seed=1))
    result = search.run(spec("partial-fixed", n_trials=3), sampler=sampler, runs_dir=tmp_path, progress=False)
    assert qualities(result) == [0.375] * 3
    assert "PartialFixedSampler" in (result.folder / "spec.toml").read_text()
    assert (result.folder / "sampler.pkl").is_file()
    done = subprocess.run(
        [sys.executable, "-m", "search", "resume", str(result.folder), "--n-trials", "5"],
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    assert qualities(search.load(result.folder)) == [0.375] * 5


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_pruner_class_and_a_pruner_object_prune_for_real(tmp_path: Path) -> None:
    named = {
        **spec("user-pruner", n_trials=6, sampler="random", pruner="user_components:StopBelow"),
        "pruner": {"threshold": 0.25, "resource": "epochs"},
    }
    named["trainer"]["options"] = {"sleep": 0.3}  # the stop reaches the trial before it ends
    result = search.run(named, runs_dir=tmp_path, progress=False)
    _assert_pruned_below(result, 0.25)
    obj = optuna.pruners.ThresholdPruner(lower=0.25)
    plain = spec("object-pruner", n_trials=6, sampler="random")
    plain["trainer"]["options"] = {"sleep": 0.3}
    other = search.run(plain, pruner=obj, runs_dir=tmp_path, progress=False)
    assert "ThresholdPruner" in (other.folder / "spec.toml").read_text()
    _assert_pruned_below(other, 0.25)


def _assert_pruned_below(result: search.Result, threshold: float) -> None:
    """The toy trainer's first report is quality / 2: below the threshold it is pruned there."""
    states = {t.number: t.state for t in result.study.get_trials(deepcopy=False)}
    for trial in result.study.get_trials(deepcopy=False):
        first = trial.intermediate_values[min(trial.intermediate_values)]
        expected = optuna.trial.TrialState.PRUNED if first < threshold else optuna.trial.TrialState.COMPLETE
        assert states[trial.number] == expected, (trial.number, trial.intermediate_values)
    assert optuna.trial.TrialState.PRUNED in states.values() and optuna.trial.TrialState.COMPLETE in states.values()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_sampler_that_does_not_pickle_samples_on_a_thread_and_is_passed_again_to_resume(tmp_path: Path) -> None:
    from user_components import LockedSampler

    result = search.run(
        spec("locked", n_trials=2), sampler=LockedSampler("a", seed=3), runs_dir=tmp_path, progress=False
    )
    assert len(result.study.get_trials(deepcopy=False)) == 2 and not (result.folder / "sampler.pkl").exists()
    components._OBJECTS.clear()  # a new session: the object is gone
    with pytest.raises(SpecError) as caught:
        search.resume(result.folder, n_trials=3, progress=False)
    assert caught.value.key == "study.sampler" and "search.resume(folder, sampler=...)" in caught.value.problem
    again = search.resume(result.folder, n_trials=3, sampler=LockedSampler("b", seed=4), progress=False)
    assert len(again.study.get_trials(deepcopy=False)) == 3


def test_an_object_from_python_replaces_the_spec_files_sampler_and_pruner(tmp_path: Path) -> None:
    from search.api import load_spec_like, to_toml

    path = tmp_path / "s.toml"
    path.write_text(
        to_toml(
            {
                **spec("file", sampler="tpe"),
                "sampler": {"n_startup_trials": 3},
                "pruner": {"resource": "epochs", "n_startup_trials": 2},
            }
        )
    )
    sampler = components.register("sampler", LowerHalfSampler(0.5, seed=1))
    pruner = components.register("pruner", optuna.pruners.ThresholdPruner(lower=0.1))
    campaign = load_spec_like(path, sampler=sampler, pruner=pruner)
    assert (campaign.study.sampler, campaign.study.pruner) == (ENTRY, "optuna.pruners._threshold:ThresholdPruner")
    assert campaign.source == str(path) and campaign.sampler_options == {}
    assert campaign.pruning.resource == "epochs" and campaign.pruning.options == {}
    assert "sampler user_components:LowerHalfSampler" in campaign.text.splitlines()[0]
