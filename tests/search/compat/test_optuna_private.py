"""The seam over Optuna's private API: each family checked once, the public path taken where the private one moved,
and a real campaign run end to end on the public path alone."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from optuna.storages.journal import JournalFileBackend, JournalStorage
from optuna.storages.journal._storage import JournalStorageReplayResult

import search
from search.compat import optuna_private as op
from search.store.folder import CampaignFolder
from search.store.journal import PublicJournalStorage
from search.store.snapshot import snapshot_path
from search.store.storage import open_storage
from tests.search.toy_specs import toy_spec

# What each family's private path stands on, as the seam imported it: deleting one is what an Optuna release that
# moved it does to the seam's import (the name is gone).
BREAK = {
    "study": (op, "_CONSTRAINTS_KEY"),
    "tell": (op, "_tell_with_warning"),
    "journal": (op, "JournalStorageReplayResult"),
    "samplers": (op, "default_gamma_multiobjective"),  # what optuna 4.2 lacks
}


@pytest.fixture(autouse=True)
def fresh_check() -> Iterator[None]:
    op.reset()
    yield
    op.reset()


def test_this_optuna_runs_every_private_path_and_says_so_in_one_line(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="search.compat.optuna_private"):
        assert all(op.uses(f) for f in op.FAMILIES)
        op.uses("study")
    lines = [r.getMessage() for r in caplog.records if r.name == "search.compat.optuna_private"]
    assert lines == [f"optuna {optuna.__version__}: private fast paths: study, tell, journal, samplers"]


@pytest.mark.parametrize("family", op.FAMILIES)
def test_a_moved_private_name_sends_its_family_alone_to_the_public_path(
    family: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    owner, name = BREAK[family]
    monkeypatch.delattr(owner, name)
    with caplog.at_level(logging.WARNING, logger="search.compat.optuna_private"):
        found = op.paths()
    assert {f for f, (path, _) in found.items() if path == op.PUBLIC} == {family}
    assert name in found[family][1]  # why: the name that is gone
    (line,) = [r.getMessage() for r in caplog.records if r.name == "search.compat.optuna_private"]
    assert f"public API for {family} (" in line


def test_a_private_member_that_no_longer_behaves_fails_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """A behaviour check, not only a name check: the replay's table that the writer updates must be the one read."""
    monkeypatch.setattr(JournalStorageReplayResult, "_trial_exists_and_updatable", lambda self, tid, log: False)
    assert not op.uses("journal") and "_trial_exists_and_updatable" in op.paths()["journal"][1]


def test_the_environment_variable_forces_the_public_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYPERSWEEP_OPTUNA_PUBLIC", "journal,samplers")
    assert [f for f in op.FAMILIES if not op.uses(f)] == ["journal", "samplers"]


def test_the_public_study_accessors_answer_as_the_private_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    study = op.create_study(directions=["minimize"])
    trial = study.ask()
    study.tell(trial, 1.0)
    second = study.ask()
    private = (op.storage_of(study), op.study_id(study), op.trial_id(second), op.frozen_id(study, study.trials[0]))
    monkeypatch.setenv("HYPERSWEEP_OPTUNA_PUBLIC", "study")
    op.reset()
    assert not op.uses("study")
    assert (op.storage_of(study), op.study_id(study), op.trial_id(second), op.frozen_id(study, study.trials[0])) == (
        private
    )
    assert [t.number for t in op.get_trials(study, deepcopy=False, use_cache=True)] == [0, 1]

    def stops(s: optuna.Study, frozen: optuna.trial.FrozenTrial) -> None:
        s.stop()

    assert op.run_callback(study, stops, study.trials[0]) is True
    assert op.run_callback(study, lambda s, t: None, study.trials[0]) is False
    for dist, inside, outside in [
        (optuna.distributions.FloatDistribution(0, 1, step=0.25), 0.75, 0.8),
        (optuna.distributions.IntDistribution(1, 9, step=2), 5.0, 4.0),
        (optuna.distributions.CategoricalDistribution(["a", "b"]), 1.0, 2.0),
    ]:
        assert (op.contains(dist, inside), op.contains(dist, outside)) == (True, False)


def test_the_writer_opens_optunas_public_journal_storage_on_the_public_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(*BREAK["journal"])
    storage = open_storage(f"journal:{tmp_path / 'j.log'}", writer=True, create=True)
    assert type(storage) is PublicJournalStorage
    study = optuna.create_study(storage=storage, study_name="s")
    study.enqueue_trial({"x": 1.0})
    study.optimize(lambda t: t.suggest_float("x", 0, 2), n_trials=2)
    assert storage.flush() > 0
    again = optuna.load_study(study_name="s", storage=JournalStorage(JournalFileBackend(str(tmp_path / "j.log"))))
    assert [t.value for t in again.trials] == [1.0, study.trials[1].value]
    assert type(open_storage(f"journal:{tmp_path / 'j.log'}")) is JournalStorage  # readers: Optuna's own


def _fit(config, reporter):  # noqa: ANN001, ANN202 - a user's plain trainer
    metrics = {}
    for epoch in range(1, config.epochs + 1):
        metrics = {"score": config.params["quality"] * epoch / config.epochs}
        reporter.report(epoch, metrics)
    return metrics


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_campaign_runs_to_its_end_with_every_private_path_broken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TPE past its startup, the journal, tells, a callback that calls ``study.stop()``: all on the public API."""
    for owner, name in BREAK.values():
        monkeypatch.delattr(owner, name)
    told: list[int] = []

    def stop_at_eight(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        told.append(trial.number)
        if len(told) == 8:
            study.stop()  # outside optimize, Optuna's own raises: the campaign would fail

    spec = {**toy_spec("public", n_trials=40, sampler="tpe"), "sampler": {"n_startup_trials": 3}}
    result = search.run(spec, trainer=_fit, runs_dir=tmp_path, progress=False, callbacks=[stop_at_eight])
    assert not any(op.uses(f) for f in op.FAMILIES)
    complete = result.trials[result.trials["state"] == "COMPLETE"]
    assert len(told) >= 8 and 8 <= len(complete) < 40  # study.stop() was heard
    plain = optuna.load_study(
        study_name="public", storage=JournalStorage(JournalFileBackend(str(CampaignFolder(result.folder).journal)))
    )
    assert len(plain.trials) == len(result.trials)
    assert not snapshot_path(CampaignFolder(result.folder).journal).exists()  # it pickles private state: none here
