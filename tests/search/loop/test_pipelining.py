"""Sampling off the dispatch path and batched trials, on a real LocalCluster with real storage."""

from __future__ import annotations

import dataclasses
import time
import tomllib
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState
from toy_specs import toy_toml

from cluster import ClusterOptions, DaskExecutor, open_cluster
from cluster.executor import Finished, TrialRequest
from cluster.simulated import SimulatedExecutor, TrialPlan
from search.loop.campaign import NEVER_STARTED, Campaign, RunningTrial
from search.loop.dispatch import Dispatcher
from search.sampling.samplers import make_sampler
from search.session.runner import load_study
from search.spec.campaign_spec import SpecError, parse_spec
from search.store.folder import CampaignFolder

pytestmark = pytest.mark.slow


def make(
    tmp_path: Path,
    n_trials: int = 3,
    sleep: float = 0.0,
    options: dict[str, Any] | None = None,
    choices: tuple[float, ...] = (0.25, 0.5, 0.75),
    **study: Any,
) -> tuple[Any, CampaignFolder, optuna.Study]:
    """One-epoch toy trials over ``choices``; ``study``: more ``[study]`` keys. No ``[cluster]``: each test opens its
    own."""
    text = toy_toml(
        "pipe",
        n_trials,
        1,
        seed=5,
        trainer={"options": {"sleep": sleep, **(options or {})}},
        space={"quality": {"type": "categorical", "choices": list(choices)}},
        cluster={"n_workers": None},
        **study,
    )
    spec = parse_spec(tomllib.loads(text), "pipe.toml", text)
    folder = CampaignFolder(tmp_path / "pipe")
    folder.create(text)
    return spec, folder, load_study(spec, folder, create=True)


class WaitsForTrialZero(optuna.samplers.RandomSampler):
    """A slow sampler (0.1 s per ask) that samples trial 1 only once trial 0 has been told.

    Impossible if sampling blocked the loop: a slow sampler must be asked on its own thread.
    """

    def before_trial(self, study, trial):  # type: ignore[no-untyped-def]
        time.sleep(0.1)

    def sample_independent(self, study, trial, param_name, param_distribution):  # type: ignore[no-untyped-def]
        if trial.number == 1:
            deadline = time.monotonic() + 30
            while (
                study._storage.get_trial(
                    study._storage.get_trial_id_from_study_id_trial_number(study._study_id, 0)
                ).state
                != TrialState.COMPLETE
            ):
                if time.monotonic() > deadline:
                    raise TimeoutError("trial 0 was never told while trial 1 was being sampled")
                time.sleep(0.01)
        return super().sample_independent(study, trial, param_name, param_distribution)


@pytest.mark.timeout(120)
def test_a_trial_finishing_while_a_slow_sampler_works_is_told_without_waiting_for_it(tmp_path: Path) -> None:
    spec, folder, study = make(tmp_path, n_trials=3)
    study.sampler = WaitsForTrialZero(seed=1)
    with open_cluster(ClusterOptions(n_workers=1)) as client:
        Campaign(spec, folder, study, DaskExecutor(client, "test-pipe-ask")).run()
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3  # no TimeoutError from the sampler


@pytest.mark.timeout(120)
def test_batched_trials_each_report_fail_or_complete_on_their_own(tmp_path: Path) -> None:
    spec, folder, study = make(tmp_path, n_trials=7, batch_trials=3, choices=(-1.0, 0.5, 0.75))
    with open_cluster(ClusterOptions(n_workers=1)) as client:
        # sampling inline makes the batches deterministic: 3, 3 and the last 1
        Campaign(spec, folder, study, DaskExecutor(client, "test-pipe-batch"), sampling="inline").run()
    trials = study.get_trials()
    assert [t.user_attrs.get("batch", 1) for t in trials] == [3, 3, 3, 3, 3, 3, 1]
    for t in trials:
        failing = t.params["quality"] < 0
        assert t.state == (TrialState.FAIL if failing else TrialState.COMPLETE)
        assert ("negative" in t.user_attrs.get("fail_reason", "")) == failing
        assert (folder.trial(t.number) / "metrics.jsonl").exists() != failing  # reports of its own
    first_batch = sorted(trials[:3], key=lambda t: t.user_attrs["started"])
    for before, after in zip(first_batch, first_batch[1:]):  # one after another in one task
        assert before.user_attrs["finished"] <= after.user_attrs["started"]
        assert before.user_attrs["worker"] == after.user_attrs["worker"]


@pytest.mark.timeout(180)
def test_a_batch_whose_worker_dies_is_retried_trial_by_trial(tmp_path: Path) -> None:
    marker = tmp_path / "died"
    spec, folder, study = make(tmp_path, n_trials=3, batch_trials=3, options={"die_once": str(marker)})
    with open_cluster(ClusterOptions(n_workers=1)) as client:
        Campaign(spec, folder, study, DaskExecutor(client, "test-pipe-lost"), sampling="inline").run()
    trials = study.get_trials()
    assert marker.exists()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3
    retries = [t.user_attrs.get("retries") for t in trials]
    # only a trial seen starting on the dead worker is charged; those waiting behind it in the batch are not
    assert retries[0] in (None, 1) and retries[1:] == [None, None]


class SlowSampler(optuna.samplers.RandomSampler):
    def sample_independent(self, study, trial, param_name, param_distribution):  # type: ignore[no-untyped-def]
        time.sleep(1.5)
        return super().sample_independent(study, trial, param_name, param_distribution)


@pytest.mark.timeout(120)
def test_a_trial_asked_after_the_time_budget_ends_pruned_not_running(tmp_path: Path) -> None:
    spec, folder, study = make(tmp_path, n_trials=5, time_budget=0.5)
    study.sampler = SlowSampler(seed=2)
    with open_cluster(ClusterOptions(n_workers=1)) as client:
        Campaign(spec, folder, study, DaskExecutor(client, "test-pipe-budget")).run()
    trials = study.get_trials()
    assert trials and all(t.state.is_finished() for t in trials)
    never = [t for t in trials if t.user_attrs.get("stop_reason") == NEVER_STARTED]
    assert never and all(t.state == TrialState.PRUNED for t in never)


@pytest.mark.parametrize("value", [0, -1, "many", True])
def test_batch_trials_must_be_auto_or_a_positive_integer(tmp_path: Path, value: object) -> None:
    text = toy_toml("pipe", 2, 1, batch_trials=value)
    with pytest.raises(SpecError, match=r"batch_trials.*\"auto\" or an integer from 1 to 10,000"):
        parse_spec(tomllib.loads(text), "pipe.toml", text)


def _collect_finished(executor: DaskExecutor, numbers: set[int], timeout: float = 60.0) -> dict[int, Any]:
    done: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    while set(done) != numbers:
        assert time.monotonic() < deadline, f"finished {sorted(done)} of {sorted(numbers)}"
        for event in executor.events(timeout=0.5):
            if isinstance(event, Finished):
                done[event.number] = event.outcome
    return done


def _config(number: int, quality: float = 0.5) -> dict[str, Any]:
    return {
        "study": "x",
        "number": number,
        "params": {"quality": quality},
        "seed": number,
        "epochs": 1,
        "options": {"sleep": 0.0},
    }


@pytest.mark.timeout(120)
def test_the_dask_executor_runs_a_batch_as_one_task_and_honours_a_preferred_worker() -> None:
    with open_cluster(ClusterOptions(n_workers=2)) as client:
        executor = DaskExecutor(client, "test-pipe-exec", runners=False)  # tasks (runners: tests/cluster)
        workers = sorted(client.scheduler_info()["workers"])
        with pytest.raises(ValueError, match="one width"):
            executor.submit_batch(
                [
                    TrialRequest(0, "toy_trainers:fit", _config(0)),
                    TrialRequest(1, "toy_trainers:fit", _config(1), width=2),
                ]
            )
        batch = [
            TrialRequest(n, "toy_trainers:fit", _config(n, -1.0 if n == 11 else 0.5), prefer=workers[1])
            for n in (10, 11, 12)
        ]
        executor.submit_batch(batch)
        outcomes = _collect_finished(executor, {10, 11, 12})
        placed = []
        for number, prefer in zip(range(20, 24), [workers[0], workers[1], workers[0], workers[1]]):
            executor.submit(TrialRequest(number, "toy_trainers:fit", _config(number), prefer=prefer))
            placed.append((_collect_finished(executor, {number})[number].worker, prefer))
        executor.close()
    assert all(worker == prefer for worker, prefer in placed)
    assert [outcomes[n].status for n in (10, 11, 12)] == ["ok", "error", "ok"]
    assert {outcomes[n].worker for n in (10, 11, 12)} == {workers[1]}  # one task, where it was asked to go
    assert outcomes[10].finished <= outcomes[11].started <= outcomes[12].started


def test_a_queued_task_is_sent_after_the_oldest_running_task_not_yet_followed(tmp_path: Path) -> None:
    spec, folder, study = make(tmp_path, n_trials=4)

    class Idle:
        virtual_time = False

    dispatch = Dispatcher(spec, Idle(), time.time)  # type: ignore[arg-type]
    for number, (worker, started) in enumerate([("w-a", 5.0), ("w-b", 2.0), ("w-c", 9.0)]):
        running = RunningTrial(study.ask(), {}, 1, 0.0, started_at=started, worker=worker)  # type: ignore[arg-type]
        dispatch.running[number] = running
        dispatch._new_task([running])  # noqa: SLF001
    picks = [dispatch._preferred_worker(1) for _ in range(4)]  # noqa: SLF001
    assert picks == ["w-b", "w-a", "w-c", ""]  # oldest first; each running task followed once
    assert dispatch._preferred_worker(2) == ""  # noqa: SLF001 - wide trials are left to Dask


class _TwoSeconds:
    """A simulated trial: two epochs of one virtual second."""

    def plan(self, config, rng):  # type: ignore[no-untyped-def]
        return TrialPlan((1.0, 1.0), ({"score": 0.5, "epoch": 1.0}, {"score": 0.5, "epoch": 2.0}))


@pytest.mark.parametrize("sampler", ["random", "tpe"])
@pytest.mark.timeout(120)
def test_with_one_slot_and_no_queue_each_trial_is_asked_after_the_last_one_was_told(
    tmp_path: Path, sampler: str
) -> None:
    """One worker, ``dispatch_ahead = 0``, one trial per task: nothing is asked ahead, so trial k's sampler
    knew all k trials before it (``batch_trials = "auto"`` would group these short trials, asked together)."""
    spec, folder, study = make(tmp_path, n_trials=6, dispatch_ahead=0, batch_trials=1)
    spec = dataclasses.replace(spec, study=dataclasses.replace(spec.study, sampler=sampler))
    study.sampler = make_sampler(sampler, spec.space, spec.study.seed)
    executor = SimulatedExecutor(1, _TwoSeconds(), controller_time_scale=0)
    Campaign(spec, folder, study, executor, clock=executor.clock).run()
    assert [t.user_attrs["sampler_saw"] for t in study.get_trials()] == list(range(6))
    with open_cluster(ClusterOptions(n_workers=1)) as client:
        spec, folder, study = make(tmp_path / "dask", n_trials=5, dispatch_ahead=0, batch_trials=1)
        spec = dataclasses.replace(spec, study=dataclasses.replace(spec.study, sampler=sampler))
        study.sampler = make_sampler(sampler, spec.space, spec.study.seed)
        Campaign(spec, folder, study, DaskExecutor(client, "test-pipe-no-ahead")).run()
    assert [t.user_attrs["sampler_saw"] for t in study.get_trials()] == list(range(5))


def test_the_spec_sets_the_pruner_of_a_study_created_elsewhere(tmp_path: Path) -> None:
    spec, folder, _study = make(tmp_path)
    study = optuna.create_study(direction="maximize")  # Optuna's default pruner is a MedianPruner
    assert isinstance(study.pruner, optuna.pruners.MedianPruner)
    Campaign(spec, folder, study, SimulatedExecutor(1, _TwoSeconds(), controller_time_scale=0))
    assert isinstance(study.pruner, optuna.pruners.NopPruner)  # the spec says pruner = "none" (its default)


def test_time_limits_look_at_the_running_trials_once_a_second_and_at_once_when_the_budget_runs_out(
    tmp_path: Path,
) -> None:
    """Scanning every running trial on each loop iteration was 12% of a 1,024-worker campaign's time: the
    dispatcher looks once per ``TIME_CHECK_INTERVAL`` of its clock, and at once when the time budget is spent."""
    spec, folder, study = make(tmp_path, n_trials=4, trial_timeout=5)
    now = [0.0]

    class Stops:
        virtual_time = True
        asked: list[int] = []

        def stop(self, number: int) -> None:
            self.asked.append(number)

    executor = Stops()
    dispatch = Dispatcher(spec, executor, lambda: now[0])  # type: ignore[arg-type]
    for number, started in enumerate([0.0, 0.0, 0.8]):
        running = RunningTrial(study.ask(), {}, 1, 0.0, started_at=started, worker="w")  # type: ignore[arg-type]
        dispatch.running[number] = running
    dispatch.enforce_time_limits(campaign_over=False)  # t=0: nothing past its limit
    now[0] = 5.5
    dispatch.enforce_time_limits(campaign_over=False)  # trials 0 and 1 are past 5 s
    assert executor.asked == [0, 1]
    now[0] = 6.0
    dispatch.enforce_time_limits(campaign_over=False)  # trial 2 is past since 5.8, but this look is early
    assert executor.asked == [0, 1]
    now[0] = 6.6
    dispatch.enforce_time_limits(campaign_over=False)  # a second after the last look: trial 2 is seen
    assert executor.asked == [0, 1, 2]
    dispatch.running[3] = RunningTrial(study.ask(), {}, 1, 0.0, started_at=6.5, worker="w")  # type: ignore[arg-type]
    now[0] = 6.7
    dispatch.enforce_time_limits(campaign_over=True)  # the budget ran out: everyone still running, now
    assert executor.asked == [0, 1, 2, 3]
    assert [dispatch.running[n].stop_reason for n in range(4)] == ["trial timeout"] * 3 + ["time budget"]
