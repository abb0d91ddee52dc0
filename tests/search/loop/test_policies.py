"""The policies a campaign asks when a trial ends: the retry cap, at unit level and on a real Campaign."""

from __future__ import annotations

import tomllib
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from cluster.executor import CANCELLED, ERROR, LOST, OK, Outcome
from cluster.simulated import SimulatedExecutor, TrialPlan
from search.loop.campaign import Campaign
from search.loop.policies import (
    TARGET_REACHED,
    Decision,
    KilledTrials,
    Policy,
    Resubmit,
    RetryLostTrials,
    Verdict,
)
from search.loop.segments import Stop
from search.loop.trials import RunningTrial
from search.session.runner import load_study
from search.spec.campaign_spec import parse_spec
from search.store.folder import CampaignFolder
from search.store.records import write_attrs
from search.vocab.terms import Transition
from trainers.api import TrialConfig

pytestmark = pytest.mark.timeout(120)  # a hang guard; these run in about a second


def running_trial(study: optuna.Study, started: bool = True) -> RunningTrial:
    trial = study.ask()
    config = TrialConfig("retry", trial.number, {"x": 0.5}, seed=1, epochs=1, device="cpu")
    return RunningTrial(trial, config, width=1, submitted=0.0, started_at=1.0 if started else None)


def lost() -> Outcome:
    return Outcome(LOST, error="worker died")


def ends(policy: Policy, running: RunningTrial, outcome: Outcome) -> Decision:
    """The policy's decision on a frozen view of ``running``, applied as the campaign applies it."""
    view = running.view()
    decision = policy.on_finished(view, outcome)
    assert running.view() == view  # the policy changed nothing
    if isinstance(decision, Resubmit):
        write_attrs(running.trial, **decision.attrs)
        running.counted(requeue=decision.requeue, retry=decision.retry)
    return decision


@pytest.mark.parametrize("max_retries", [0, 1, 2, 5])
def test_a_lost_trial_is_retried_exactly_max_retries_times(max_retries: int) -> None:
    study = optuna.create_study()  # in memory
    running = running_trial(study)
    policy = RetryLostTrials(max_retries)
    decisions = []
    for _ in range(max_retries + 3):
        running.started_at = 1.0  # each run started before its worker died
        decisions.append(ends(policy, running, lost()))
    resubmits = [d for d in decisions if isinstance(d, Resubmit)]
    assert len(resubmits) == max_retries
    assert decisions[:max_retries] == resubmits  # the retries come first, then the cap holds for good
    assert all(d is None for d in decisions[max_retries:])
    assert all(d.config is running.config for d in resubmits)  # the same trial again, same config
    assert running.attempts == max_retries
    frozen = study.trials[0]
    assert frozen.user_attrs.get("retries", 0) == max_retries  # the last retry is the one recorded


def test_only_a_lost_worker_is_retried_and_never_a_stopped_trial() -> None:
    study = optuna.create_study()
    policy = RetryLostTrials(3)
    for status in (OK, ERROR, CANCELLED):
        running = running_trial(study)
        assert ends(policy, running, Outcome(status, error="x" if status != OK else "")) is None
        assert running.attempts == 0
    stopped = running_trial(study)
    stopped.stop_reason = "pruned"
    assert not isinstance(ends(policy, stopped, lost()), Resubmit) and stopped.attempts == 0
    assert all("retries" not in t.user_attrs for t in study.trials)


# --- the cap on a real Campaign (simulated executor: virtual time, every attempt lost) ---------------------

SPEC = """
[study]
name = "retry"
direction = "maximize"
metric = "score"
sampler = "random"
seed = 2
n_trials = {n_trials}
max_retries = {max_retries}

[trainer]
entry = "bench.trivial:fit"
epochs = 2

[space]
x = {{ type = "float", low = 0.0, high = 1.0 }}
"""


class TwoEpochs:
    def plan(self, config, rng):  # type: ignore[no-untyped-def]
        return TrialPlan((1.0, 1.0), ({"score": 0.1, "epoch": 1.0}, {"score": 0.2, "epoch": 2.0}))


@pytest.mark.parametrize("max_retries", [0, 2])
def test_a_campaign_runs_a_trial_whose_worker_always_dies_max_retries_plus_one_times(
    tmp_path: Path, max_retries: int
) -> None:
    n_trials = 3
    text = SPEC.format(n_trials=n_trials, max_retries=max_retries)
    spec = parse_spec(tomllib.loads(text), "retry.toml", text)
    folder = CampaignFolder(tmp_path / "retry")
    folder.create(text)
    study = load_study(spec, folder, create=True)
    # failure_rate must be < 1; with this seed every one of the attempts below is lost (checked by counts).
    executor = SimulatedExecutor(
        2, TwoEpochs(), seed=11, failure_rate=0.999, recovery_seconds=0.0, controller_time_scale=0
    )
    Campaign(spec, folder, study, executor, clock=executor.clock).run()
    trials = study.get_trials()
    assert len(trials) == n_trials
    assert executor.counts["ok"] == 0, "an attempt survived: pick another executor seed"
    assert executor.counts["submitted"] == n_trials * (max_retries + 1)
    assert executor.counts["lost"] == n_trials * (max_retries + 1)
    for t in trials:
        assert t.state == TrialState.FAIL
        assert t.user_attrs.get("retries", 0) == max_retries
        assert t.user_attrs["fail_reason"].startswith("worker lost") and "retries spent" in t.user_attrs["fail_reason"]


def test_a_trial_lost_before_it_started_is_sent_again_without_being_charged_a_retry() -> None:
    """Queued on a worker that died (or behind another trial of its batch): not its fault, not a retry."""
    study = optuna.create_study()
    policy = RetryLostTrials(max_retries=0)
    queued = running_trial(study, started=False)
    decisions = [ends(policy, queued, lost()) for _ in range(RetryLostTrials.MAX_REQUEUES)]
    assert all(isinstance(d, Resubmit) for d in decisions) and queued.attempts == 0
    assert "retries" not in study.trials[0].user_attrs
    assert ends(policy, queued, lost()) is None  # a bound: a trial no worker can keep alive ends
    started = running_trial(study)
    assert ends(policy, started, lost()) is None  # max_retries=0: a started trial is charged


@pytest.mark.parametrize("status", [LOST, CANCELLED])
def test_a_trial_that_only_shared_a_killed_worker_runs_again_free_unless_it_was_stopping(status: str) -> None:
    study = optuna.create_study()
    policy = KilledTrials()
    innocent = running_trial(study)
    innocent.collateral = True
    decision = ends(policy, innocent, Outcome(status, error="killed"))
    assert isinstance(decision, Resubmit) and decision.config is innocent.config
    assert (innocent.attempts, innocent.requeues, innocent.collateral) == (0, 1, False)
    assert ends(policy, innocent, Outcome(status, error="lost again")) is None  # a later loss is a loss

    stopping = running_trial(study)
    stopping.collateral, stopping.stop_reason = True, "time budget"
    stopping.reports.append((1, {"score": 0.5}, 2.0))
    assert ends(policy, stopping, Outcome(status, error="killed")) == Verdict(
        TrialState.PRUNED, (), "time budget (its worker was restarted)"
    )


def test_a_killed_trial_is_pruned_when_it_reported_else_failed_with_the_kill_as_reason() -> None:
    study = optuna.create_study()
    policy = KilledTrials()
    silent = running_trial(study)
    silent.killed = "trial timeout: killed after 61 s without answering the stop request"
    assert ends(policy, silent, Outcome(CANCELLED, error="cancelled")) == Verdict(TrialState.FAIL, (), silent.killed)
    spoke = running_trial(study)
    spoke.killed = silent.killed
    spoke.reports.append((1, {"score": 0.5}, 2.0))
    assert ends(policy, spoke, Outcome(LOST, error="gone")).state == TrialState.PRUNED
    assert ends(policy, running_trial(study), Outcome(LOST, error="gone")) is None  # not killed: not ours


def test_a_trial_asked_to_stop_whose_worker_is_then_lost_keeps_its_stop_as_the_verdict_not_a_retry() -> None:
    study = optuna.create_study()
    policy = RetryLostTrials(3)
    stopping = running_trial(study)
    stopping.stop_reason = "time budget"
    assert ends(policy, stopping, lost()) == Verdict(TrialState.FAIL, (), "time budget (then its worker was lost)")
    stopping.reports.append((1, {"score": 0.5}, 2.0))
    assert ends(policy, stopping, lost()).state == TrialState.PRUNED
    assert stopping.attempts == 0
    queued = running_trial(study, started=False)  # still queued at the time budget's end when its worker died
    queued.stop_reason = "time budget"
    assert ends(policy, queued, lost()).state == TrialState.PRUNED


def test_a_trial_cut_by_its_jobs_walltime_runs_again_without_being_charged_a_retry() -> None:
    """The batch job ended, the trial did not fail: sent again from its checkpoint, its retries untouched (a bound
    still holds: a trial longer than any job's walltime ends after MAX_REQUEUES)."""
    study = optuna.create_study()
    policy = RetryLostTrials(max_retries=0)
    cut = running_trial(study)
    expired = Outcome(LOST, error="its batch job reached its walltime (worker left)", job_expired=True)
    decisions = [ends(policy, cut, expired) for _ in range(RetryLostTrials.MAX_REQUEUES)]
    assert all(isinstance(d, Resubmit) and d.requeue and not d.retry for d in decisions)
    assert (cut.attempts, cut.requeues) == (0, RetryLostTrials.MAX_REQUEUES)
    assert "retries" not in study.trials[0].user_attrs
    assert ends(policy, cut, expired) is None  # max_retries=0: after the bound, a loss is charged


def test_a_sweep_trial_whose_worker_is_lost_after_its_target_runs_again_from_its_checkpoint() -> None:
    """Its value is the steps it took, known when it ends: lost under load after the target, it was PRUNED and
    counted as never reached (a sweep's B_crit then depended on the load); now it is retried like any lost trial,
    and reaches the same report again. Its retries spent, its stop stands as before."""
    study = optuna.create_study()
    policy = RetryLostTrials(1)
    hit = running_trial(study)
    hit.reports.append((3, {"val_accuracy": 0.8}, 2.0))
    hit.stop(Stop(TARGET_REACHED, Transition.TARGET_REACHED))
    decision = ends(policy, hit, lost())
    assert isinstance(decision, Resubmit) and decision.retry and hit.attempts == 1
    assert ends(policy, hit, lost()) == Verdict(TrialState.PRUNED, (), "target reached (then its worker was lost)")
