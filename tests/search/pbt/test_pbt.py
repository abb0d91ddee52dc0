"""Population-based training on a real LocalCluster: exploit, explore, lineage, replayable schedules."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import optuna
import pytest

from cluster import ClusterOptions, DaskExecutor, open_cluster
from search.loop.campaign import Campaign
from search.pbt.journal import PBTJournal
from search.pbt.policy import Action, Decision, Member, PBTPolicy, PBTSpec, recorded_schedule
from search.pbt.population import Population
from search.pbt.replay import NotReplayable, replay_member
from search.reports.data import timeline
from search.reports.report import write_report
from search.reports.reproduce import comparison_text, reproduce_trial
from search.session.runner import load_study
from search.spec.campaign_spec import CampaignSpec, SpecError, parse_spec
from search.store.folder import CampaignFolder
from trainers.api import RecordingReporter, TrialConfig
from trainers.classifier import fit

ROOT = Path(__file__).resolve().parents[3]


def small() -> str:
    text = (ROOT / "examples" / "digits-pbt.toml").read_text()
    return (
        text.replace("n_trials = 6", "n_trials = 4")
        .replace("epochs = 12", "epochs = 6")
        .replace("interval = 3", "interval = 2")
        .replace('model = "cnn"', 'model = "mlp"')
    )


def new_campaign(tmp_path: Path) -> tuple[CampaignSpec, CampaignFolder, optuna.Study]:
    text = small()
    spec = parse_spec(tomllib.loads(text), "pbt.toml", text)
    folder = CampaignFolder(tmp_path / "digits-pbt")
    folder.create(text)
    return spec, folder, load_study(spec, folder, create=True)


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
@pytest.mark.timeout(900)
def test_a_pbt_campaign_on_two_workers_ranks_everyone_at_every_rung_and_replays(tmp_path: Path) -> None:
    spec, folder, study = new_campaign(tmp_path)
    for lr in (0.05, 0.08, 0.03, 1e-4):  # one hopeless member, so truncation selection has work to do
        study.enqueue_trial({"lr": lr, "weight_decay": 1e-5})
    # 4 members on 2 workers: two wait at each rung, holding no slot, until the others get there
    with open_cluster(ClusterOptions(n_workers=2)) as client:
        Campaign(spec, folder, study, DaskExecutor(client, "test-pbt")).run()

    trials = study.get_trials()
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials), [
        t.user_attrs.get("fail_reason") for t in trials
    ]
    rungs = PBTJournal(folder.root).rungs()
    assert sorted(rungs) == [2, 4]  # every segment end but the last
    for epoch, rung in rungs.items():
        assert sorted(rung.scores) == [0, 1, 2, 3], f"rung {epoch} ranked {sorted(rung.scores)}"
        assert rung.applied and any(d.action is Action.EXPLOIT for d in rung.decisions.values()), epoch
    bad = next(t for t in trials if t.params["lr"] == 1e-4)
    lineage = bad.user_attrs["pbt_lineage"]
    assert lineage and lineage[0]["epoch"] == 2 and lineage[0]["source"] != bad.number
    assert lineage[0]["params"]["lr"] > 1e-3 and bad.value > 0.5  # it ended with a good member's weights and rates
    assert bad.user_attrs["config"]["params"]["lr"] == lineage[-1]["params"]["lr"]  # the params it ended with
    for t in trials:
        own = folder.trial(t.number)
        steps = [json.loads(line)["step"] for line in (own / "metrics.jsonl").read_text().splitlines()]
        assert steps == [1, 2, 3, 4, 5, 6], (t.number, steps)  # its own history, each step once
        assert len(list(own.glob("events.out.tfevents*"))) == 1  # no other member's event file copied in
        runs = [run for segment in t.user_attrs["segments"] for run in segment["runs"]]
        assert len(runs) == 3 and t.user_attrs["started"] == runs[0][0]  # its whole time, segment by segment
        log = own / "stdout.log"  # made by the trial's first output, or by the first mark below
        marks = [line for line in (log.read_text() if log.exists() else "").splitlines() if "[hypersweep pbt]" in line]
        assert len(marks) == len(t.user_attrs["pbt_lineage"])
    schedule = bad.user_attrs["pbt_schedule"]
    assert len(schedule) >= 2 and schedule[0][1] == pytest.approx(1e-4)
    # The recorded schedule replays as a fixed one: a fresh run follows the same rate epoch by epoch.
    reporter = RecordingReporter()
    fit(
        TrialConfig(
            study="replay",
            number=0,
            seed=1,
            epochs=6,
            dataset="digits",
            params={"lr": 0.01, "model": "mlp", "optimizer": "sgd", "schedule": "piecewise", "lr_points": schedule},
        ),
        reporter,
    )
    followed = recorded_schedule([(s, m) for s, m in bad.user_attrs["history"]])
    assert recorded_schedule([(s, m) for s, m in reporter.reports]) == followed
    # the report: who copied whom at each rung, and a timeline span per segment
    page = write_report(folder.root).index.read_text()
    section = page.split('<section id="pbt">')[1].split("</section>")[0]
    assert f"{bad.number} &lt;- {lineage[0]['source']}" in section and "4 rung" not in section
    timeline_text = page.split('<section id="timeline">')[1].split("</section>")[0]
    assert "4 trial(s) in 12 runs (segments" in timeline_text  # members, not segments, are the trials
    spans = timeline(study.get_trials())
    assert len(spans) == 12 and sum(s.asked is not None for s in spans) == 8  # 4 x 3 segments; waits before 2nd, 3rd
    # reproduce replays its whole chain: its first segment, then the source's weights at epoch 2, then its own
    result = reproduce_trial(folder.root, bad.number)
    assert result.matched, comparison_text(result)
    assert [c.where for c in result.checks if c.metric == "val_accuracy"][1:] == [f"step {s}" for s in range(1, 7)]


def test_a_rung_decided_but_not_copied_is_copied_when_the_population_is_loaded(tmp_path: Path) -> None:
    folder = CampaignFolder(tmp_path / "c")
    for number in (0, 1):
        (folder.trial(number) / "segment-2").mkdir(parents=True)
        (folder.trial(number) / "segment-2" / "checkpoint.pt").write_bytes(b"state of %d" % number)
        (folder.trial(number) / "checkpoint.pt").write_bytes(b"state of %d" % number)
        (folder.trial(number) / "stdout.log").write_text(f"trial {number}\n")
    journal = PBTJournal(folder.root)
    journal.decided(
        2,
        {0: 0.9, 1: 0.1},
        {0: Decision(Action.CONTINUE, None, {"lr": 0.1}), 1: Decision(Action.EXPLOIT, 0, {"lr": 0.08})},
    )
    with open(journal.path, "a") as fh:
        fh.write('{"applied": ')  # torn by a kill mid-write
    dists = {"lr": optuna.distributions.FloatDistribution(1e-4, 1.0, log=True)}
    policy = PBTPolicy(PBTSpec(interval=2, hyperparams=("lr",)), True, dists, 0)
    population = Population(policy, folder, "val_accuracy", 6, 2)
    assert (folder.trial(1) / "checkpoint.pt").read_bytes() == b"state of 0"  # the copy, made now
    assert (folder.trial(1) / "stdout.log").read_text().startswith("trial 1\n")  # its own log, marked
    assert PBTJournal(folder.root).rungs()[2].applied
    config = TrialConfig(study="s", number=1, seed=1, epochs=6, dataset="digits", params={"lr": 0.5})
    resumed = population.first_segment(config)
    assert (resumed.epochs, resumed.params) == (4, {"lr": 0.08})  # the segment after the decided rung, its new lr
    assert population.lineage(1) == [{"epoch": 2, "source": 0, "params": {"lr": 0.08}}]


def test_a_member_that_did_not_train_all_epochs_is_not_replayable(tmp_path: Path) -> None:
    spec, folder, study = new_campaign(tmp_path)
    trial = study.ask(fixed_distributions=spec.space.base_distributions())
    study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    with pytest.raises(NotReplayable, match="did not train all 6 epochs") as info:
        replay_member(spec, study, folder, trial.number, fit)
    assert info.value.exit_code == 2 and "\n" not in str(info.value)


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


@pytest.mark.slow
def test_a_resumed_member_sends_again_its_own_reports_never_those_of_the_checkpoint_it_inherited(
    tmp_path: Path,
) -> None:
    def run(folder: Path, seed: int, lr: float, epochs: int) -> list[int]:
        reporter = RecordingReporter()
        fit(
            TrialConfig(
                study="s",
                number=seed,
                seed=seed,
                epochs=epochs,
                dataset="digits",
                schedule_epochs=4,
                inherit_checkpoint=True,
                checkpoint_dir=str(folder),
                params={"lr": lr, "model": "mlp", "optimizer": "sgd"},
            ),
            reporter,
        )
        return [step for step, _m in reporter.reports]

    source, member = tmp_path / "source", tmp_path / "member"
    assert run(source, 1, 0.05, 2) == [1, 2]
    member.mkdir()
    (member / "checkpoint.pt").write_bytes((source / "checkpoint.pt").read_bytes())  # the exploit's copy
    assert run(member, 2, 0.02, 3) == [3]  # epochs 1-2 are the source's: not this member's reports
    assert run(member, 2, 0.02, 4) == [3, 4]  # resumed from its own checkpoint: epoch 3 sent again, then 4
