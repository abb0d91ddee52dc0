"""The out-of-memory policy at unit level: PRUNED "out of memory", infeasible where the sampler reads it, first."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from cluster.backends import worker_args
from cluster.executor import ERROR, LOST, Outcome
from search.loop.oom import OOM_CONSTRAINT, OUT_OF_MEMORY, device_fields
from search.loop.policies import OutOfMemory, RetryLostTrials, Verdict, decide
from search.loop.trials import RunningTrial
from trainers.api import TrialConfig

pytestmark = pytest.mark.timeout(120)


def _running(study: optuna.Study) -> RunningTrial:
    trial = study.ask()
    config = TrialConfig("oom", trial.number, {"x": 0.5}, seed=1, epochs=1, device="cpu")
    return RunningTrial(trial, config, width=1, submitted=0.0, started_at=1.0)


@pytest.mark.parametrize("constrained", [True, False])
def test_an_oom_is_pruned_with_its_reason_and_infeasible_only_for_a_constrained_sampler(constrained: bool) -> None:
    study = optuna.create_study()
    running = _running(study)
    oom = Outcome(ERROR, error="out of memory: CUDA out of memory. Tried to allocate 2 GiB", oom=True)
    ruling = decide([OutOfMemory(constrained), RetryLostTrials(3)], running.view(), oom)
    assert isinstance(ruling.decision, Verdict)
    assert (ruling.decision.state, ruling.decision.reason) == (TrialState.PRUNED, OUT_OF_MEMORY)
    assert ruling.attrs["out_of_memory"].startswith("out of memory: CUDA")
    assert dict(ruling.constraints) == ({OOM_CONSTRAINT: 1.0} if constrained else {})


def test_a_worker_killed_for_memory_is_never_retried_as_a_loss() -> None:
    study = optuna.create_study()
    running = _running(study)
    policies = [OutOfMemory(False), RetryLostTrials(3)]
    killed = Outcome(LOST, error="out of memory: its worker was killed with 900 MiB in use", oom=True)
    decision = decide(policies, running.view(), killed).decision
    assert isinstance(decision, Verdict) and (decision.state, decision.reason) == (TrialState.PRUNED, OUT_OF_MEMORY)
    assert running.attempts == 0
    assert OutOfMemory(False).on_finished(running.view(), Outcome(LOST, error="worker died")) is None


def test_device_figures_become_trial_attributes_where_measured() -> None:
    measured = Outcome(
        "ok", share=0.25, peak_memory=3 * 2**30, memory_kind="cuda", memory_shared=4, gpu_utilization=61.5
    )
    assert device_fields(measured) == {
        "gpu_share": 0.25,
        "peak_memory": 3 * 2**30,
        "memory_kind": "cuda",
        "memory_shared": 4,
        "gpu_utilization": 61.5,
    }
    assert device_fields(Outcome("ok")) == {}


def test_a_packed_gpu_worker_runs_a_thread_per_trial_it_holds() -> None:
    assert worker_args(8, 1, trials_per_gpu=4) == ["--nthreads", "32", "--resources", "GPU=8"]
    assert worker_args(0, 3, trials_per_gpu=4) == ["--nthreads", "3", "--resources", "CPU=3"]
