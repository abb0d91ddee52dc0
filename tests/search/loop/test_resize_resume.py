"""A controller SIGKILLed right after it decided, recorded and sent a resize (a real process, CPU twin), then
resumed: the trial goes on in its second segment at 2 slots from its checkpoint; no example lost or repeated."""

from __future__ import annotations

import math
import signal
import time
from pathlib import Path

import optuna
import pytest

from search.loop.segments import Segment
from search.session.runner import RunOptions, resume_campaign
from search.store.records import Attr
from search.vocab.terms import Transition
from tests.campaign_storage import load
from tests.killed_run import killed_run
from tests.search.loop.resize_kill import hooks


def _killed_run(runs: Path, *args: str) -> int:
    return killed_run("tests.search.loop.resize_kill", str(runs), *args)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_controller_killed_right_after_a_resize_resumes_the_trial_in_its_wider_segment(tmp_path: Path) -> None:
    assert _killed_run(tmp_path) == -signal.SIGKILL
    killed_at = time.time()
    folder = tmp_path / "resize-kill"
    (left,) = load(folder, "resize-kill").get_trials()
    assert left.state == optuna.trial.TrialState.RUNNING
    recorded = [(s["transition"], s["width"]) for s in left.user_attrs[Attr.SEGMENTS]]
    assert recorded == [("start", 1), ("resize", 2)]  # the resize was on disk before it was acted on

    resume_campaign(folder, RunOptions(progress=False, hooks=hooks()))
    (trial,) = load(folder, "resize-kill").get_trials()
    assert trial.state == optuna.trial.TrialState.COMPLETE, trial.user_attrs.get(Attr.FAIL_REASON)
    segments = [Segment.from_record(r) for r in trial.user_attrs[Attr.SEGMENTS]]
    assert [(s.transition, s.width, s.start_epoch, s.end_epoch) for s in segments] == [
        (Transition.START, 1, 0, 1),
        (Transition.RESIZE, 2, 1, 3),
    ]  # resumed in its second segment: not restarted at 1 slot, not resized a second time
    (first_run,), (resumed_run,) = (s.runs for s in segments)  # one run each: none at 1 slot after the resume
    assert first_run[1] < killed_at < resumed_run[0]
    history = dict(trial.user_attrs[Attr.HISTORY])
    n = int(history[1]["examples"])
    assert sorted(history) == [1, 2, 3]
    assert [history[e]["examples"] for e in (1, 2, 3)] == [n, 2 * n, 3 * n]  # none lost, none repeated
    assert history[3]["steps"] == math.ceil(n / 32) + 2 * math.ceil(n / 64)  # epochs 2 and 3 at the doubled batch
    assert history[3]["lr"] == pytest.approx(2 * trial.params["lr"])
    assert trial.user_attrs[Attr.CONFIG]["data_parallel"] == 2
    steps = [line for line in (folder / "trials" / "0" / "metrics.jsonl").read_text().splitlines() if line]
    assert len(steps) == 3


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_elastic_resize_killed_then_resumed_on_one_worker_goes_on_at_the_width_that_fits(tmp_path: Path) -> None:
    """The ``[elastic]`` policy's resize takes the same path (a NextSegment recorded and synced, then sent): killed
    right after it recorded 1 -> 2 slots on 2 workers x 1 slot, resumed on 1 worker: the trial's 2-slot segment,
    which ran no epoch, goes on at 1 slot from its checkpoint; none lost, none repeated."""
    assert _killed_run(tmp_path, "elastic") == -signal.SIGKILL
    folder = tmp_path / "elastic-kill"
    (left,) = load(folder, "elastic-kill").get_trials()
    assert [(s["transition"], s["width"]) for s in left.user_attrs[Attr.SEGMENTS]] == [("start", 1), ("resize", 2)]

    resume_campaign(folder, RunOptions(progress=False, n_workers=1))
    (trial,) = load(folder, "elastic-kill").get_trials()
    assert trial.state == optuna.trial.TrialState.COMPLETE, trial.user_attrs.get(Attr.FAIL_REASON)
    segments = [Segment.from_record(r) for r in trial.user_attrs[Attr.SEGMENTS]]
    assert [(s.transition, s.width, s.start_epoch, s.end_epoch) for s in segments] == [
        (Transition.START, 1, 0, 1),
        (Transition.CONTINUE, 1, 1, 2),  # the resize the workers left cannot hold: at 1 slot
        (Transition.CONTINUE, 1, 2, 3),  # promoted again at epoch 2: no room for 2 slots
    ]
    history = dict(trial.user_attrs[Attr.HISTORY])
    n = int(history[1]["examples"])
    assert sorted(history) == [1, 2, 3]
    assert [history[e]["examples"] for e in (1, 2, 3)] == [n, 2 * n, 3 * n]  # none lost, none repeated
    assert history[3]["steps"] == 3 * math.ceil(n / 32)  # batch = "fixed": the same steps per epoch
    assert trial.user_attrs[Attr.CONFIG]["data_parallel"] == 1
    steps = [line for line in (folder / "trials" / "0" / "metrics.jsonl").read_text().splitlines() if line]
    assert len(steps) == 3
