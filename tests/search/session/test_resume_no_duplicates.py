"""A resumed campaign never runs a parameter set again: kill -9 (or SIGTERM) of the controller at random
moments, and kill -9 of its Dask workers.

The slow tests run ``bench/chaos.py`` (real ``python -m search run`` / ``resume`` processes,
an embedded LocalCluster, the journal storage, SIGKILL/SIGTERM) and check the study with plain Optuna.
"""

from __future__ import annotations

import itertools
import tomllib
from pathlib import Path

import pytest

from bench.chaos import SPEC, chaos
from search.loop.sampler_factory import campaign_sampler, sampler_seed
from search.session.runner import load_study
from search.spec.campaign_spec import parse_spec
from search.store.folder import CampaignFolder


def _spec(sampler: str, trials: int = 12) -> tuple:
    text = SPEC.format(name="chaos", sampler=sampler, seed=3, trials=trials, epochs=2, sleep=0.0, workers=1)
    return parse_spec(tomllib.loads(text), "chaos.toml", text), text


def test_every_sampler_the_campaign_builds_has_its_own_seed_and_a_new_campaign_keeps_the_study_seed() -> None:
    assert sampler_seed(7, 0, 0) == 7  # a new campaign samples as it always did
    seeds = [sampler_seed(7, trials, restart) for trials, restart in itertools.product(range(50), range(4))]
    assert len(set(seeds)) == len(seeds)
    assert sampler_seed(7, 12, 1) == sampler_seed(7, 12, 1)  # deterministic
    assert sampler_seed(8, 12, 1) != sampler_seed(7, 12, 1)


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_a_study_loaded_for_resume_does_not_replay_the_stream_its_trials_came_from(
    tmp_path: Path, sampler: str
) -> None:
    spec, text = _spec(sampler)
    folder = CampaignFolder(tmp_path / "chaos")
    folder.create(text)
    study = load_study(spec, folder, create=True, writer=False)
    dists = spec.space.distributions()
    first = [study.ask(fixed_distributions=dists).params for _ in range(4)]  # asked ahead, then the controller dies
    study = load_study(spec, folder, create=False, writer=False)
    again = [study.ask(fixed_distributions=dists).params for _ in range(4)]
    assert not [p for p in again if p in first]
    # Without the new seed, the same sampler would have sampled exactly what it had asked (the old bug):
    replay = campaign_sampler(spec)
    study.sampler = replay
    assert study.ask(fixed_distributions=dists).params == first[0]
    # The same storage gives the same resumed sampler: resume stays reproducible.
    one, two = (load_study(spec, folder, create=False, writer=False) for _ in range(2))
    assert one.ask(fixed_distributions=dists).params == two.ask(fixed_distributions=dists).params


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize(("sampler", "kills"), [("random", 3), ("tpe", 4)])  # TPE's replay is the risky one
def test_kill_9_of_the_controller_then_resume_no_repeated_lost_or_missing_trial(
    tmp_path: Path, sampler: str, kills: int
) -> None:
    result = chaos(
        sampler,
        reps=kills,
        seed=1,
        trials=24,
        epochs=3,
        sleep=0.2,
        workers=2,
        window=2.0,
        root=tmp_path,
        timeout=150.0,
        say=lambda _line: None,
    )
    report = "\n".join(result.lines())
    assert len(result.kills) == kills and not result.finished_early, report
    assert result.final_returncode == 0, report
    assert result.trials == 24 and not result.lost, report
    assert result.duplicated == [], report
    assert result.missing_reports == {} and result.repeated_reports == {}, report


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_sigterm_of_the_controller_and_kill_9_of_workers_then_resume_no_repeated_lost_failed_or_missing_trial(
    tmp_path: Path,
) -> None:
    result = chaos(
        "random",
        reps=2,
        seed=2,
        trials=12,
        epochs=3,
        sleep=0.2,
        workers=2,
        window=2.0,
        root=tmp_path,
        timeout=120.0,
        say=lambda _line: None,
        signal="TERM",
        kill_workers=2,
    )
    report = "\n".join(result.lines())
    assert len(result.kills) == 2 and not result.finished_early, report
    assert [kill["returncode"] for kill in result.kills] == [130, 130], report
    assert len(result.worker_kills) == 2, report
    assert result.final_returncode == 0, report
    assert result.trials == 12 and not result.lost and not result.failed, report
    assert result.duplicated == [], report
    assert result.missing_reports == {} and result.repeated_reports == {}, report
