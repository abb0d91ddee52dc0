"""A trial created with its parameters in one journal entry: the trial ``Study.ask`` would have made."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from search.sampling.presample import ask_fixed
from search.sampling.process import Asked, Done, ReplaySampler
from search.sampling.random_draws import RandomDraws
from search.store.storage import open_storage

SPACE: dict[str, BaseDistribution] = {
    "op": CategoricalDistribution(["none", "skip", "conv1", "conv3", "avg"]),
    "only": CategoricalDistribution(["one"]),  # single-valued: Optuna takes its value without a draw
    "lr": FloatDistribution(1e-5, 1e-1, log=True),
    "width": IntDistribution(16, 512, log=True),
    "fixed_int": IntDistribution(3, 3),
}


def _campaign_study(path: Path, sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    return optuna.create_study(
        study_name="s", storage=open_storage(f"journal:{path}", writer=True, create=True), sampler=sampler
    )


def _asks(study: optuna.Study, n: int, fast: bool) -> list[tuple[int, dict, dict]]:
    out = []
    for _ in range(n):
        trial = ask_fixed(study, SPACE) if fast else study.ask(fixed_distributions=SPACE)
        trial.suggest_int("late", 0, 9)  # a define-by-run parameter after the fixed ones
        out.append((trial.number, trial.params, trial.distributions))
        study.tell(trial, 0.0)
    return out


def test_random_draws_make_the_trial_study_ask_makes_in_one_journal_entry(tmp_path: Path) -> None:
    fast = _campaign_study(tmp_path / "fast.journal", RandomDraws(seed=4))
    slow = _campaign_study(tmp_path / "slow.journal", RandomDraws(seed=4))
    optunas = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=4))
    assert _asks(fast, 60, fast=True) == _asks(slow, 60, fast=False) == _asks(optunas, 60, fast=False)
    entries = fast._storage._replay_result.log_number_read
    trial = ask_fixed(fast, SPACE)
    assert fast._storage._replay_result.log_number_read == entries + 1  # Study.ask: one, and one per parameter
    assert trial.params["only"] == "one" and trial.params["fixed_int"] == 3
    fast._storage.flush(sync=True)
    replayed = optuna.load_study(
        study_name="s", storage=JournalStorage(JournalFileBackend(str(tmp_path / "fast.journal")))
    )
    assert replayed.trials[-1].params == trial.params and replayed.trials[-1].state == TrialState.RUNNING


def test_an_enqueued_trial_is_asked_as_optuna_asks_it(tmp_path: Path) -> None:
    study = _campaign_study(tmp_path / "q.journal", RandomDraws(seed=1))
    study.enqueue_trial({"op": "avg", "lr": 0.01})
    trial = ask_fixed(study, SPACE)
    assert trial.params["op"] == "avg" and trial.params["lr"] == 0.01
    again = _campaign_study(tmp_path / "plain.journal", RandomDraws(seed=1))
    again.enqueue_trial({"op": "avg", "lr": 0.01})
    assert again.ask(fixed_distributions=SPACE).params == trial.params  # the same draws for the rest


def test_the_replay_gives_the_childs_ask_to_the_created_trial_and_its_tell_to_the_childs_number() -> None:
    told: list[Done] = []
    replay = ReplaySampler(SPACE, told.append)
    study = optuna.create_study(sampler=replay)
    params = {"op": "conv3", "only": "one", "lr": 0.003, "width": 64, "fixed_int": 3, "depth": 5}
    replay.stage(Asked(replica=17, params=params, saw=0, seconds=0.0))
    trial = ask_fixed(study, SPACE)
    assert trial.params == {name: params[name] for name in SPACE}
    assert trial.suggest_int("depth", 1, 8) == 5  # the child's conditional parameter
    study.tell(trial, 1.0)
    assert told[-1].replica == 17 and told[-1].params == params

    replay.stage(Asked(replica=18, params={"op": "none"}, saw=0, seconds=0.0))  # not every fixed parameter
    assert replay.presample(SPACE) is None  # nothing consumed: Study.ask takes the staged ask
    with pytest.raises(RuntimeError, match="not sampled by the sampler process"):
        ask_fixed(study, SPACE)


def test_the_campaigns_journal_gives_created_trials_its_kept_distributions(tmp_path: Path) -> None:
    """One distribution object per JSON text, as for parameters set one by one: 40,000 trials held 100 MB more."""
    study = _campaign_study(tmp_path / "m.journal", RandomDraws(seed=2))
    trials = [ask_fixed(study, SPACE) for _ in range(3)]
    frozen = [study._storage.get_trial(t._trial_id) for t in trials]
    for name in SPACE:
        assert frozen[0].distributions[name] is frozen[1].distributions[name] is frozen[2].distributions[name]
    assert [f.params for f in frozen] == [t.params for t in trials]
    assert {type(v) for f in frozen for v in f.params.values()} == {str, float, int}
