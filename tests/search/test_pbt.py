"""Population-based training on a real LocalCluster: exploit, explore, lineage, replayable schedules."""

from __future__ import annotations

import tomllib
from pathlib import Path

import optuna
import pytest

from cluster import ClusterOptions, DaskExecutor, open_cluster
from search.campaign import Campaign
from search.store.folder import CampaignFolder
from search.pbt.policy import Action, Member, PBTPolicy, PBTSpec, recorded_schedule
from search.runner import load_study
from search.spec.campaign_spec import SpecError, parse_spec
from trainers.api import RecordingReporter, TrialConfig
from trainers.classifier import fit

ROOT = Path(__file__).resolve().parents[2]


def small() -> str:
    text = (ROOT / "examples" / "digits-pbt.toml").read_text()
    return (text.replace("n_trials = 6", "n_trials = 4").replace("epochs = 12", "epochs = 6")
            .replace("interval = 3", "interval = 2").replace('model = "cnn"', 'model = "mlp"'))  # fmt: skip


def test_policy_ranks_a_whole_rung_bottom_exploits_top_and_perturbs() -> None:
    dists = {"lr": optuna.distributions.FloatDistribution(1e-4, 1.0, log=True)}
    spec = PBTSpec(interval=2, quantile=0.25, resample_probability=0.0, hyperparams=("lr",))
    policy = PBTPolicy(spec, True, dists, 0)
    pop = [Member(i, 2, score, {"lr": 0.01 * (i + 1)}) for i, score in enumerate([0.9, 0.5, 0.8, 0.1])]
    decisions = policy.decide_rung(2, pop)
    worst = decisions[3]
    assert worst.action is Action.EXPLOIT and worst.source == 0
    assert worst.params["lr"] in (pytest.approx(0.01 * 0.8), pytest.approx(0.01 * 1.25))
    assert [decisions[n].action for n in (0, 1, 2)] == [Action.CONTINUE] * 3  # 1 of 4 is the bottom quarter
    assert PBTPolicy(spec, True, dists, 0).decide_rung(2, pop[::-1]) == decisions  # arrival order is irrelevant


def test_policy_six_members_and_a_diverged_one() -> None:
    dists = {"lr": optuna.distributions.FloatDistribution(1e-4, 1.0, log=True)}
    policy = PBTPolicy(PBTSpec(interval=2, quantile=0.34, hyperparams=("lr",)), False, dists, 3)  # minimize
    scores = [0.3, float("nan"), 0.1, 0.9, 0.2, 0.5]
    decisions = policy.decide_rung(4, [Member(i, 4, s, {"lr": 0.1}) for i, s in enumerate(scores)])
    exploiting = {n for n, d in decisions.items() if d.action is Action.EXPLOIT}
    assert exploiting == {1, 3}  # floor(6 * 0.34) = 2: the diverged one and the worst
    assert {decisions[n].source for n in exploiting} <= {2, 4}
    assert all(d.action is Action.CONTINUE for d in policy.decide_rung(4, [Member(0, 4, 0.1, {"lr": 0.1})]).values())


def test_recorded_schedule_merges_equal_rates() -> None:
    history = [(1, {"lr": 0.1, "steps": 10}), (2, {"lr": 0.1, "steps": 20}), (3, {"lr": 0.05, "steps": 30})]
    assert recorded_schedule(history) == [[0, 0.1], [20, 0.05]]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_pbt_campaign_exploits_records_lineage_and_its_schedules_replay(tmp_path: Path) -> None:
    text = small()
    spec = parse_spec(tomllib.loads(text), "pbt.toml", text)
    folder = CampaignFolder(tmp_path / "digits-pbt")
    folder.create(text)
    study = load_study(spec, folder, create=True)
    for lr in (0.05, 0.08, 0.03, 1e-4):  # one hopeless member, so truncation selection has work to do
        study.enqueue_trial({"lr": lr, "weight_decay": 1e-5})
    # One worker: segments end in a fixed order, so the hopeless member is ranked against all
    # four at its first rung (asynchronous PBT ranks whoever has reached the rung so far).
    with open_cluster(ClusterOptions(n_workers=1)) as client:
        Campaign(spec, folder, study, DaskExecutor(client, "test-pbt")).run()

    trials = study.get_trials()
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials), [t.user_attrs.get("fail_reason") for t in trials]
    bad = next(t for t in trials if t.params["lr"] == 1e-4)
    lineage = bad.user_attrs["pbt_lineage"]
    assert lineage, "the hopeless member never exploited anyone"
    assert lineage[0]["source"] != bad.number and lineage[0]["params"]["lr"] > 1e-3
    assert bad.value > 0.5  # it ended with a good member's weights and rates
    schedule = bad.user_attrs["pbt_schedule"]
    assert len(schedule) >= 2 and schedule[0][1] == pytest.approx(1e-4)
    # The recorded schedule replays as a fixed one: a fresh run follows the same rate epoch by epoch.
    reporter = RecordingReporter()
    config = TrialConfig(study="replay", number=0, seed=1, epochs=6, dataset="digits",
                         params={"lr": 0.01, "model": "mlp", "optimizer": "sgd", "schedule": "piecewise",
                                 "lr_points": schedule})  # fmt: skip
    fit(config, reporter)
    replayed = [m["lr"] for _s, m in reporter.reports]
    followed = recorded_schedule([(s, m) for s, m in bad.user_attrs["history"]])
    assert recorded_schedule([(s, m) for s, m in reporter.reports]) == followed
    assert replayed[0] == pytest.approx(1e-4)


def test_pbt_spec_errors() -> None:
    text = (ROOT / "examples" / "digits-pbt.toml").read_text()
    for old, new, key in [
        ("quantile = 0.25", "quantile = 0.7", "pbt.quantile"),
        ("interval = 3", "interval = 12", "pbt.interval"),
        ('hyperparams = ["lr", "weight_decay"]', 'hyperparams = ["momentum"]', "pbt.hyperparams"),
        ('scheduler = "pbt"', 'scheduler = "pbt"\npruner = "median"', "study.pruner"),
    ]:
        with pytest.raises(SpecError) as info:
            parse_spec(tomllib.loads(text.replace(old, new)), "p.toml")
        assert info.value.key == key, str(info.value)
