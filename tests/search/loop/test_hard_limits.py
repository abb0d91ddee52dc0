"""A trainer that hangs cannot hold the campaign: past a time limit plus ``stop_grace`` its worker's
processes are killed (and restarted by the nanny), and the trial is recorded with the reason.

Real embedded LocalCluster (nanny processes), a real trainer that stops answering.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import psutil
import pytest

from search.session.runner import RunOptions, run_campaign
from search.spec.campaign_spec import load_spec
from tests.campaign_storage import load as load_campaign
from tests.spec_files import write_spec

pytestmark = pytest.mark.slow

SPEC = """
[study]
name = "hang"
direction = "maximize"
metric = "score"
sampler = "grid"
seed = 1
n_trials = {trials}
{limits}
stop_grace = 1

[trainer]
entry = "toy_trainers:hanging"
epochs = 2
options = {{ pids = "{pids}", sleep = 0.3 }}

[space]
hang = {{ type = "categorical", choices = {hang} }}
reports = {{ type = "categorical", choices = [0, 2] }}

[cluster]
n_workers = 2
"""

State = optuna.trial.TrialState


def run(tmp_path: Path, trials: int, limits: str, hang: str) -> tuple[list[optuna.trial.FrozenTrial], Path]:
    pids = tmp_path / "pids"
    pids.mkdir()
    text = SPEC.format(trials=trials, limits=limits, hang=hang, pids=pids)
    spec = load_spec(write_spec(tmp_path / "hang.toml", text))
    folder = run_campaign(spec, RunOptions(runs_dir=tmp_path / "runs", progress=False))
    return load_campaign(folder.root, "hang").get_trials(), pids


def assert_children_gone(pids: Path) -> None:
    files = list(pids.iterdir())
    assert files, "no hanging trial started its child process"
    for path in files:
        pid = int(path.read_text())
        try:
            alive = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            alive = False
        assert not alive, f"trial {path.name}'s child process {pid} outlived the kill"


@pytest.mark.timeout(240)  # a hang guard: without the kill this campaign never ends
def test_a_trial_that_hangs_past_its_timeout_is_killed_and_recorded(tmp_path: Path) -> None:
    trials, pids = run(tmp_path, 4, "trial_timeout = 3", "[false, true]")

    by_kind = {(t.params["hang"], t.params["reports"]): t for t in trials}
    assert len(by_kind) == 4
    for reports in (0, 2):
        assert by_kind[(False, reports)].state == State.COMPLETE
    pruned = by_kind[(True, 2)]  # it reported: PRUNED, its intermediate values stand
    assert pruned.state == State.PRUNED and len(pruned.intermediate_values) == 2
    assert pruned.user_attrs["stop_reason"].startswith("trial timeout: killed after")
    failed = by_kind[(True, 0)]  # nothing reported: FAIL, with the same kind of reason
    assert failed.state == State.FAIL
    assert failed.user_attrs["fail_reason"].startswith("trial timeout: killed after")
    assert "retries" not in failed.user_attrs  # a kill is not a lost worker: no retry charged
    for killed in (pruned, failed):  # where and how long it ran, though its worker never sent an outcome
        attrs = killed.user_attrs
        assert attrs["worker"].startswith(("tcp://", "tls://")) and isinstance(attrs["started"], float)
        assert attrs["duration"] >= 3.0 and attrs["finished"] >= attrs["started"] + attrs["duration"] - 1e-6
    assert_children_gone(pids)


@pytest.mark.timeout(240)
def test_the_time_budget_ends_a_campaign_whose_trials_all_hang(tmp_path: Path) -> None:
    trials, pids = run(tmp_path, 20, "time_budget = 5", "[true]")

    assert trials and all(t.state in (State.PRUNED, State.FAIL) for t in trials)  # none left RUNNING
    started = [t for t in trials if t.user_attrs.get("stop_reason") != "never started"]
    assert started
    for trial in started:
        reason = trial.user_attrs.get("stop_reason") or trial.user_attrs.get("fail_reason")
        assert reason.startswith("time budget"), reason
    assert any("killed after" in (t.user_attrs.get("stop_reason") or t.user_attrs.get("fail_reason")) for t in started)
    assert_children_gone(pids)
