"""Sampling in a child process on a replica study: real child processes, real Optuna samplers."""

from __future__ import annotations

import collections
import logging
import multiprocessing
import os
import pickle
import signal
import time
import tomllib
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import TrialState
from toy_specs import toy_toml

from cluster import ClusterOptions, DaskExecutor, open_cluster
from cluster.simulated import SimulatedExecutor, TrialPlan
from search.loop.campaign import Campaign
from search.sampling.asker import AskFailed
from search.sampling.process import NotPortable, ProcessAsker, ReplaySampler, SamplerDied
from search.sampling.samplers import make_sampler
from search.sampling.tpe import RefitTPESampler
from search.session.runner import load_study
from search.spec.campaign_spec import REPLICA_SAFE, SpecError, parse_spec
from search.store.folder import CampaignFolder
from spaces.params import parse_space

DISTS = {"x": FloatDistribution(0.0, 1.0), "k": IntDistribution(1, 8)}


class RecordingTPE(optuna.samplers.TPESampler):
    """TPE that keeps what ``after_trial`` saw: its copy travels back from the child with its state."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed=seed)
        self.seen: list[tuple[int, TrialState, Any, dict[int, float]]] = []

    def after_trial(self, study, trial, state, values):  # type: ignore[no-untyped-def]
        self.seen.append((trial.number, state, values, dict(trial.intermediate_values)))
        super().after_trial(study, trial, state, values)


class SlowTPE(RecordingTPE):
    """TPE taking 50 ms more per ask: the child's trials arrive one by one, well apart."""

    def before_trial(self, study, trial):  # type: ignore[no-untyped-def]
        time.sleep(0.05)
        super().before_trial(study, trial)


class Broken(optuna.samplers.RandomSampler):
    def sample_independent(self, study, trial, param_name, param_distribution):  # type: ignore[no-untyped-def]
        raise ValueError("boom in the child")


def _asker(study: optuna.Study) -> ProcessAsker[tuple[optuna.Trial, int]]:
    return ProcessAsker(study, DISTS, lambda saw: (study.ask(fixed_distributions=DISTS), saw), lambda: None)


def _take(asker: ProcessAsker, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while (item := asker.take()) is None:
        assert time.monotonic() < deadline, "the sampler process sent nothing"
        time.sleep(0.005)
    return item


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_every_tell_reaches_the_child_before_its_next_ask_and_its_state_comes_back() -> None:
    study = optuna.create_study(direction="maximize", sampler=RecordingTPE(seed=3))
    asker = _asker(study)
    try:
        assert isinstance(study.sampler, ReplaySampler)
        asker.want(3)
        taken = [_take(asker) for _ in range(3)]
        assert [saw for _, saw in taken] == [0, 0, 0]
        for trial, _ in taken:
            assert 0.0 <= trial.params["x"] <= 1.0 and 1 <= trial.params["k"] <= 8
        study.tell(taken[0][0], 0.3)
        study.tell(taken[1][0], 0.9)
        taken[2][0].report(0.5, step=1)
        study.tell(taken[2][0], state=TrialState.PRUNED)
        asker.want(1)
        assert _take(asker)[1] == 3  # all three were recorded before the fourth ask
        child_copy = pickle.loads(asker.sampler_state(wait=30.0))
        assert [(n, s, v, i) for n, s, v, i in child_copy.seen] == [
            (0, TrialState.COMPLETE, [0.3], {}),
            (1, TrialState.COMPLETE, [0.9], {}),
            (2, TrialState.PRUNED, [0.5], {1: 0.5}),  # Optuna tells a pruned trial its last report
        ]
    finally:
        asker.close()
    assert isinstance(study.sampler, RecordingTPE) and len(study.sampler.seen) == 3  # the child's copy, returned
    assert multiprocessing.active_children() == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", REPLICA_SAFE)
def test_each_sampler_allowed_in_a_child_asks_tells_and_comes_back(name: str) -> None:
    space = parse_space({"x": {"type": "float", "low": 0.0, "high": 1.0}, "k": {"type": "int", "low": 1, "high": 8}})
    study = optuna.create_study(sampler=make_sampler(name, space, 9))
    asker = _asker(study)
    try:
        for value in range(4):
            asker.want(1)
            trial, saw = _take(asker)
            assert saw == value and set(trial.params) == {"x", "k"}
            study.tell(trial, float(value))
    finally:
        asker.close()
    assert type(study.sampler) is type(make_sampler(name, space, 9))


@pytest.mark.timeout(120)
def test_the_child_samples_with_the_campaigns_own_seeded_sampler() -> None:
    here = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=11))
    expected = [here.ask(fixed_distributions=DISTS).params for _ in range(3)]
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=11))
    asker = _asker(study)
    try:
        asker.want(3)
        assert [_take(asker)[0].params for _ in range(3)] == expected
    finally:
        asker.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_finished_trials_seed_the_replica_and_foreign_ones_reach_it() -> None:
    study = optuna.create_study(sampler=RecordingTPE(seed=2))
    for value in (0.1, 0.2, 0.4, 0.8):
        study.add_trial(optuna.trial.create_trial(params={"x": value, "k": 2}, distributions=DISTS, value=value))
    asker = _asker(study)
    try:
        asker.want(1)
        trial, saw = _take(asker)
        assert saw == 4
        study.enqueue_trial({"x": 0.6, "k": 3})  # not sampled by the child, like a trial resumed after a crash
        foreign = study.ask(fixed_distributions=DISTS)
        study.tell(foreign, 0.7)
        study.tell(trial, 0.5)
        asker.want(1)
        assert _take(asker)[1] == 6
    finally:
        asker.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_sampler_that_raises_in_the_child_fails_take_with_its_traceback() -> None:
    study = optuna.create_study(sampler=Broken(seed=0))
    asker = _asker(study)
    try:
        asker.want(1)
        with pytest.raises(AskFailed, match="(?s)Traceback.*boom in the child"):
            _take(asker, timeout=30.0)
    finally:
        asker.close()
    assert isinstance(study.sampler, Broken)


def _refuse_in_child() -> optuna.samplers.BaseSampler:
    if multiprocessing.parent_process() is not None:
        raise RuntimeError("this sampler cannot live in a child")
    return optuna.samplers.TPESampler(seed=0)


class StaysHome(optuna.samplers.TPESampler):
    """Pickles here, fails to unpickle in the child (like a class defined in a script's ``__main__``)."""

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (_refuse_in_child, ())


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_sampler_the_child_cannot_load_is_not_portable_and_leaves_nothing_behind() -> None:
    sampler = StaysHome(seed=0)
    study = optuna.create_study(sampler=sampler)
    with pytest.raises(NotPortable, match="(?s)could not start.*this sampler cannot live in a child"):
        _asker(study)
    assert study.sampler is sampler
    assert multiprocessing.active_children() == []


@pytest.mark.timeout(120)
def test_a_child_that_dies_fails_take_instead_of_waiting_forever() -> None:
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
    asker = _asker(study)
    try:
        asker._process.kill()  # noqa: SLF001 - e.g. the OOM killer
        asker.want(2)
        with pytest.raises(SamplerDied, match="exited unexpectedly"):  # an AskFailed the supply recovers from
            _take(asker, timeout=30.0)
    finally:
        asker.close(timeout=5.0)
    assert isinstance(study.sampler, optuna.samplers.TPESampler)  # the original, as none came back
    assert multiprocessing.active_children() == []


@pytest.mark.timeout(120)
def test_close_waits_for_the_exiting_child_and_neither_kills_it_nor_warns(caplog: pytest.LogCaptureFixture) -> None:
    # The reader thread sees the pipe close and waits for the child's exit code while close() waits for the exit
    # too: when both joined at once, the loser's waitpid found the child reaped and multiprocessing called it
    # alive, so close() killed an exited child and warned it "did not exit" (in about half of all closes here).
    caplog.set_level(logging.WARNING, logger="search.sampling.process")
    for _ in range(8):
        study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
        asker = _asker(study)
        started = time.monotonic()
        asker.close(timeout=30.0)
        assert time.monotonic() - started < 10.0
        assert asker._process.exitcode == 0  # noqa: SLF001 - it exited by itself, not killed (-9)
    assert [r.getMessage() for r in caplog.records] == []
    assert multiprocessing.active_children() == []


def _spec(sampler: str = "tpe", n_trials: int = 16, epochs: int = 1, **study: Any) -> Any:
    """The toy spec ("proc", seed 4, no [cluster]: each test opens its own) parsed, and its text."""
    text = toy_toml("proc", n_trials, epochs, sampler=sampler, seed=4, cluster={"n_workers": None}, **study)
    return parse_spec(tomllib.loads(text), "proc.toml", text), text


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_tpe_campaign_samples_in_a_child_and_saves_the_childs_sampler(tmp_path: Path) -> None:
    spec, text = _spec()
    assert spec.study.sampling == "auto"
    folder = CampaignFolder(tmp_path / "proc")
    folder.create(text)
    study = load_study(spec, folder, create=True)
    with open_cluster(ClusterOptions(n_workers=2)) as client:
        campaign = Campaign(spec, folder, study, DaskExecutor(client, "test-proc"))
        campaign.run()
    assert campaign.supply.sampling == "process"  # auto chose the child process for TPE
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 16
    saw = [t.user_attrs["sampler_saw"] for t in trials]
    assert saw == sorted(saw) and all(s <= n for n, s in enumerate(saw)) and saw[-1] > 0  # tells reached the child
    assert type(study.sampler) is RefitTPESampler  # the child's sampler, handed back
    assert multiprocessing.active_children() == []


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_trials_from_the_child_launch_in_full_batches_not_one_task_each(tmp_path: Path) -> None:
    spec, text = _spec(batch_trials=4, n_trials=18)
    folder = CampaignFolder(tmp_path / "proc")
    folder.create(text)
    study = load_study(spec, folder, create=True)
    study.sampler = SlowTPE(seed=4)
    with open_cluster(ClusterOptions(n_workers=2)) as client:
        Campaign(spec, folder, study, DaskExecutor(client, "test-proc-batch")).run()
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 18
    sizes = sorted(t.user_attrs.get("batch", 1) for t in trials)
    assert sizes == [2] * 2 + [4] * 16  # the child sends one trial at a time; only the budget's tail is short
    assert isinstance(study.sampler, SlowTPE)  # the child's copy came back; it recorded every tell
    assert sorted(number for number, *_ in study.sampler.seen) == list(range(18))  # each on its own replica trial
    assert {state for _, state, _, _ in study.sampler.seen} == {TrialState.COMPLETE}


@pytest.mark.parametrize(
    ("sampler", "extra", "message"),
    [
        ("random", {"sampling": "process"}, "'process' runs only tpe, gp"),
        ("tpe", {"sampling": "thread", "deterministic": True}, "samples in order"),
        ("tpe", {"sampling": "fork"}, "is not one of auto, process, thread, inline"),
    ],
)
def test_sampling_setting_errors_name_the_value_and_the_rule(sampler: str, extra: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        _spec(sampler, **extra)


class Unpicklable(optuna.samplers.TPESampler):
    def __init__(self) -> None:
        super().__init__(seed=0)
        self.hook = lambda: None  # a lambda does not pickle


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_sampler_that_does_not_pickle_samples_on_a_thread_unless_process_was_asked_for(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runs = []
    with open_cluster(ClusterOptions(n_workers=1)) as client:
        for sampling in ("auto", "process"):
            spec, text = _spec(sampling=sampling)
            folder = CampaignFolder(tmp_path / sampling / "proc")
            folder.create(text)
            study = load_study(spec, folder, create=True)
            study.sampler = Unpicklable()
            campaign = Campaign(spec, folder, study, DaskExecutor(client, f"test-proc-{sampling}"))
            if sampling == "process":
                with pytest.raises(ValueError, match="sampling='process': the sampler Unpicklable does not pickle"):
                    campaign.run()
            else:
                campaign.run()
            runs.append((campaign, study))
    auto_campaign, auto_study = runs[0]
    assert auto_campaign.supply.sampling == "thread"
    assert len(auto_study.get_trials(states=(TrialState.COMPLETE,))) == 16
    assert "sampling on a thread instead of a child process" in caplog.text


class _OneSecond:
    def plan(self, config, rng):  # type: ignore[no-untyped-def]
        return TrialPlan((1.0,), ({"score": 0.5, "epoch": 1.0},))


@pytest.mark.parametrize(
    ("sampler", "sampling", "message"),
    [
        ("tpe", "process", "simulated campaign samples in order"),  # virtual time cannot wait for a child
        ("tpe", "thread", "simulated campaign samples in order"),
        ("tpe", "spawn", "'spawn' is not one of auto, process, thread, inline"),
    ],
)
def test_the_campaigns_sampling_override_is_checked_like_the_spec(
    tmp_path: Path, sampler: str, sampling: str, message: str
) -> None:
    spec, text = _spec(sampler)
    folder = CampaignFolder(tmp_path / "proc")
    folder.create(text)
    study = load_study(spec, folder, create=True)
    with pytest.raises(ValueError, match=message):
        Campaign(spec, folder, study, SimulatedExecutor(2, _OneSecond(), controller_time_scale=0), sampling=sampling)
    simulated = Campaign(spec, folder, study, SimulatedExecutor(2, _OneSecond(), controller_time_scale=0))
    assert simulated.supply.sampling == "inline"  # auto on virtual time


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_resumed_campaign_seeds_the_child_with_the_trials_already_finished(tmp_path: Path) -> None:
    spec, text = _spec(n_trials=10)
    folder = CampaignFolder(tmp_path / "proc")
    folder.create(text)
    study = load_study(spec, folder, create=True)
    dist = spec.space.distributions()
    for value in (0.2, 0.4, 0.6, 0.8):  # what a previous controller finished before it stopped
        study.add_trial(optuna.trial.create_trial(params={"quality": value}, distributions=dist, value=value))
    with open_cluster(ClusterOptions(n_workers=1)) as client:
        Campaign(spec, folder, study, DaskExecutor(client, "test-proc-resume")).run()
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 10
    assert min(t.user_attrs["sampler_saw"] for t in trials[4:]) >= 4  # the child knew the first four


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_sampler_child_killed_mid_campaign_is_replaced_then_a_thread_takes_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec, text = _spec(n_trials=16, epochs=2, trainer={"options": {"sleep": 0.1}})
    folder = CampaignFolder(tmp_path / "proc")
    folder.create(text)
    study = load_study(spec, folder, create=True)
    killed: list[int] = []

    def kill_the_child(snapshot: Any) -> None:  # on the loop's thread, once per iteration
        pid = getattr(campaign.supply._asker, "pid", None)  # noqa: SLF001
        if pid is not None and pid not in killed and snapshot.complete >= 3 * (len(killed) + 1):
            os.kill(pid, signal.SIGKILL)  # what the OOM killer does
            killed.append(pid)

    caplog.set_level(logging.WARNING, logger="search")
    with open_cluster(ClusterOptions(n_workers=2)) as client:
        campaign = Campaign(spec, folder, study, DaskExecutor(client, "test-proc-kill"), on_progress=kill_the_child)
        assert campaign.supply.sampling == "process"
        campaign.run()
    assert len(killed) == 3  # two new children, then the thread
    assert campaign.supply.sampling == "thread"
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 16
    repeated = [p for p, n in collections.Counter(t.params["quality"] for t in trials).items() if n > 1]
    assert repeated == []
    assert caplog.text.count("exited unexpectedly (exit code -9); starting a new one") == 2
    assert "sampling on a thread from now on" in caplog.text
    assert multiprocessing.active_children() == []
