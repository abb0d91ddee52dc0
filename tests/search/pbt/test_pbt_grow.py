"""``[elastic] grow = "pbt"``: at a decided PBT rung the survivors widen into the slots the population's next
segments leave idle, chosen for the whole rung at once by goodput per slot; an exploiting member keeps its width.

The campaign test runs on the CPU twin (real Dask LocalCluster, 2 workers x 2 slots, the project's trainer, real
torch DDP over gloo), then ``reproduce`` replays the grown member's pieces at their widths."""

from __future__ import annotations

import math
import signal
import time
import tomllib
from pathlib import Path
from typing import Any

import optuna
import pytest

from search.loop.barrier import Release, widened
from search.loop.dispatch import Room
from search.loop.elastic import ElasticGrowth
from search.loop.policies import population_of
from search.loop.segments import Segment
from search.loop.trial_maker import TrialMaker
from search.loop.trials import RunningTrial
from search.pbt.journal import PBTJournal
from search.pbt.policy import Action, Decision
from search.pbt.replay import Stint, pieces
from search.reports.data import load_campaign
from search.reports.elastic_section import elastic_section
from search.reports.reproduce import comparison_text, reproduce_trial
from search.session.runner import RunOptions, load_study, resume_campaign, run_campaign
from search.spec.campaign_spec import parse_spec
from search.spec.elastic import ElasticSpec
from search.store.folder import CampaignFolder
from search.store.records import Attr
from search.vocab.terms import Transition
from tests.campaign_storage import load
from tests.killed_run import killed_run
from tests.search.toy_specs import digits_toml
from trainers import warm_pool
from trainers.api import TrialConfig

# 3 members on 2 workers x 2 slots: at the rung (epoch 1) the worst exploits, the two survivors may take the one
# slot the 3 next segments leave idle; the lower-numbered wins the tie (both measured only at width 1).
SPEC = digits_toml(
    "pbt-grow",
    n_trials=3,
    epochs=2,
    scheduler="pbt",
    cluster={"n_workers": 2},
    top={
        "pbt": {"interval": 1, "quantile": 0.34, "resample_probability": 0.0, "hyperparams": ["lr"]},
        "elastic": {"widths": [1, 2], "grow": "pbt"},
        "enqueue": [{"lr": 0.008}, {"lr": 0.005}, {"lr": 0.001}],
    },
)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_pbt_survivor_grows_from_1_to_2_slots_at_its_rung_and_reproduces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = parse_spec(tomllib.loads(SPEC), "pbt-grow.toml", SPEC)
    folder = run_campaign(spec, RunOptions(runs_dir=tmp_path, progress=False))
    trials = load(folder.root, "pbt-grow").get_trials()
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 3, [t.user_attrs for t in trials]
    (rung,) = PBTJournal(folder.root).rungs().values()
    actions = {n: d.action for n, d in rung.decisions.items()}
    assert sorted(actions.values()) == sorted([Action.CONTINUE, Action.CONTINUE, Action.EXPLOIT]), actions
    segments = {t.number: [Segment.from_record(r) for r in t.user_attrs[Attr.SEGMENTS]] for t in trials}
    second = {n: (s[1].transition, s[1].width) for n, s in segments.items()}
    survivors = sorted(n for n, a in actions.items() if a is Action.CONTINUE)
    (exploiter,) = (n for n, a in actions.items() if a is Action.EXPLOIT)
    # one idle slot: the lower-numbered survivor takes it (a tie by goodput), the other and the exploiter keep 1
    assert second == {
        survivors[0]: (Transition.RESIZE, 2),
        survivors[1]: (Transition.CONTINUE, 1),
        exploiter: (Transition.EXPLOIT, 1),
    }, second
    grown = next(t for t in trials if t.number == survivors[0])
    assert [(s.width, s.start_epoch, s.end_epoch) for s in segments[grown.number]] == [(1, 0, 1), (2, 1, 2)]
    assert segments[grown.number][1].overrides == {}  # batch fixed: its lr and batch stay
    history = {step: metrics for step, metrics in grown.user_attrs[Attr.HISTORY]}
    n = int(history[1]["examples"])
    assert sorted(history) == [1, 2] and history[2]["examples"] == 2 * n  # examples seen continue
    assert history[2]["steps"] == 2 * math.ceil(n / 32)  # the same global batch, from the checkpoint
    assert grown.user_attrs[Attr.CONFIG]["data_parallel"] == 2
    assert [len(s.runs) for s in segments[grown.number]] == [1, 1]
    section = elastic_section(load_campaign(folder.root)).md  # the report lists the grown member alone
    rows = [[c.strip() for c in line.split("|")[1:5]] for line in section.splitlines() if line.startswith("| ")]
    assert rows[1:] == [[str(grown.number), "0: start", "0..1", "1"], [str(grown.number), "1: resize", "1..2", "2"]]
    forked: list[object] = []  # each rank process the replay asked the warm pool for: what it got (None: fresh)

    def start(*args: Any, **kwargs: Any) -> object:
        forked.append(real_start(*args, **kwargs))
        return forked[-1]

    real_start = warm_pool.start
    monkeypatch.setattr(warm_pool, "start", start)
    result = reproduce_trial(folder.root, grown.number)  # epoch 1 at 1 slot, then epoch 2 at 2 from its checkpoint
    assert result.matched, comparison_text(result)
    assert "replayed its epochs at the widths it ran them at (epochs at slots): 0..1 at 1, 1..2 at 2" in result.notes
    # its 2 ranks forked from a warm pool, as on a worker (not 2 fresh interpreters), which ended with the replay
    assert len(forked) == 2 and None not in forked, forked
    assert not warm_pool.enabled() and not warm_pool.servers()


def _killed_run(runs: Path) -> int:
    return killed_run("tests.search.pbt.pbt_grow_kill", str(runs))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_controller_killed_right_after_a_survivor_grew_resumes_it_in_its_wider_segment(tmp_path: Path) -> None:
    assert _killed_run(tmp_path) == -signal.SIGKILL
    killed_at = time.time()
    folder = tmp_path / "pbt-grow"
    left = load(folder, "pbt-grow").get_trials()
    grown = [t.number for t in left if [s["width"] for s in t.user_attrs.get(Attr.SEGMENTS, [])] == [1, 2]]
    assert len(grown) == 1 and left[grown[0]].state == optuna.trial.TrialState.RUNNING  # on disk before it was sent
    resume_campaign(folder, RunOptions(progress=False))
    trials = load(folder, "pbt-grow").get_trials()
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 3, [t.user_attrs for t in trials]
    trial = trials[grown[0]]
    segments = [Segment.from_record(r) for r in trial.user_attrs[Attr.SEGMENTS]]
    assert [(s.transition, s.width, s.start_epoch, s.end_epoch) for s in segments] == [
        (Transition.START, 1, 0, 1),
        (Transition.RESIZE, 2, 1, 2),
    ]  # resumed in its wider segment: not at 1 slot, not grown a second time
    (first_run,), (resumed_run,) = (s.runs for s in segments)  # one run each: none at 1 slot after the resume
    assert first_run[1] < killed_at < resumed_run[0]
    history = dict(trial.user_attrs[Attr.HISTORY])
    n = int(history[1]["examples"])
    assert sorted(history) == [1, 2] and history[2]["examples"] == 2 * n  # none lost, none repeated
    assert trial.user_attrs[Attr.CONFIG]["data_parallel"] == 2


def _member(study: optuna.Study, width: int, step_seconds: dict[int, float]) -> RunningTrial:
    """A member (the next trial of ``study``) that ended its segment at ``width``, having measured ``step_seconds`` per step at each
    width it ran (its segments: width 1 from epoch 0, then ``width`` from epoch 1 where it differs)."""
    params = {"lr": 0.01, "batch_size": 32}
    trial = study.ask()
    config = TrialConfig(study="s", number=trial.number, seed=1, epochs=1, params=params, data_parallel=width)
    running = RunningTrial(trial, config, width, 0.0, started_at=0.0)
    for epoch, (w, seconds) in enumerate(sorted(step_seconds.items()), start=1):
        running.reports.append((epoch, {"epoch": epoch, "steps": 10.0 * epoch, "epoch_seconds": 10 * seconds}, 0.0))
        if w > 1:
            running.segments = [
                Segment(0, Transition.START, 1, 0, epoch - 1),
                Segment(1, Transition.RESIZE, w, epoch - 1, 9),
            ]
    return running


def _release(running: RunningTrial, how: Transition) -> Release:
    segment = Segment(len(running.segments), how, running.width, 1, 2)
    return Release(running, running.config, segment)


def test_the_rung_decision_grows_the_survivors_that_gain_most_per_slot_within_the_idle_slots() -> None:
    growth = ElasticGrowth(ElasticSpec((1, 2, 4), "pbt"), rungs=(1, 3))
    assert growth.rungs == ()  # PBT's segments end at its own rungs
    study = optuna.create_study()
    fast = _member(study, 1, {1: 0.1})  # measured at 1 only: the optimistic prior, speedup 2 at width 2
    slow = _member(study, 2, {1: 0.1, 2: 0.2})  # at 2 it measured twice the step of 1: width 4 buys little
    exploiter = _member(study, 1, {1: 0.1})
    releases = [_release(fast, Transition.CONTINUE), _release(slow, Transition.CONTINUE),
                _release(exploiter, Transition.EXPLOIT)]  # fmt: skip
    # 8 slots, 4 held by the next segments (1 + 2 + 1): 4 idle; the fast survivor gains most per slot (to 4), the
    # one whose all-reduce eats what a slot buys does not grow, the exploiter keeps its width
    out = widened(releases, growth, Room(True, 8, 0))
    assert [(r.segment.transition, r.segment.width, r.config.data_parallel) for r in out] == [
        (Transition.RESIZE, 4, 4),
        (Transition.CONTINUE, 2, 2),
        (Transition.EXPLOIT, 1, 1),
    ]
    # 1 idle slot: the fast survivor to 2; none idle: no one grows
    assert [r.segment.width for r in widened(releases, growth, Room(True, 5, 0))] == [2, 2, 1]
    assert widened(releases, growth, Room(True, 4, 0)) == releases
    # trials waiting for slots come first, and the reserve (1) with them
    assert widened(releases, growth, Room(True, 6, 1)) == releases
    assert [r.segment.width for r in widened(releases, growth, Room(True, 7, 1))] == [2, 2, 1]
    promotion = ElasticGrowth(ElasticSpec((1, 2, 4), "promotion"), rungs=(1, 3))
    assert promotion.widen_survivors([fast.view()], 8, 0) == {}  # only grow = "pbt" widens survivors


def test_a_stint_is_split_where_the_members_width_changed() -> None:
    stint = Stint(0, 0, 6, {"lr": 0.1})
    assert pieces(stint, [(0, 1)]) == [(6, 1)]
    assert pieces(stint, [(0, 1), (2, 1), (2, 2), (4, 2)]) == [(2, 1), (6, 2)]
    assert pieces(Stint(0, 2, 6, {}, source=1), [(0, 1), (3, 2), (5, 1)]) == [(3, 1), (5, 2), (6, 1)]
    assert pieces(stint, [(0, 2), (1, 4), (1, 1)]) == [(1, 2), (6, 1)]  # a cut segment superseded at its start


class _Order:  # the ledger's side of asking, for a trial configured alone
    finished = 0

    def asked(self, number: int) -> None:
        pass

    def may_ask(self) -> bool:
        return True


def test_a_member_resumed_after_its_rung_grew_it_goes_on_in_its_wider_segment(tmp_path: Path) -> None:
    """A controller killed right after the rung's decision and the grown segment's record (synced before it is
    sent): the resumed member runs that segment, at 2 slots, with the parameters the journal gives it."""
    spec = parse_spec(tomllib.loads(SPEC), "pbt-grow.toml", SPEC)
    folder = CampaignFolder(tmp_path / "pbt-grow")
    folder.create(SPEC)
    study = load_study(spec, folder, create=True)
    trial = study.ask(fixed_distributions=spec.space.base_distributions())
    grown = [Segment(0, Transition.START, 1, 0, 1), Segment(1, Transition.RESIZE, 2, 1, 2, 1000)]
    trial.set_user_attr(Attr.SEGMENTS, [s.to_record() for s in grown])
    PBTJournal(folder.root).decided(
        1, {trial.number: 0.9}, {trial.number: Decision(Action.CONTINUE, None, {"lr": 0.004})}
    )
    maker = TrialMaker(
        spec.study, spec.trainer, spec.space, folder, study, _Order(), population_of(spec, folder, study)
    )
    prepared = maker.configure(trial, 0)
    assert prepared.config is not None and prepared.segments == tuple(grown)
    assert (prepared.width, prepared.config.data_parallel, prepared.config.epochs) == (2, 2, 2)
    assert prepared.config.params["lr"] == 0.004 and prepared.config.inherit_checkpoint
