"""Trials wider than a worker on a real 2-worker LocalCluster (1 slot each): every trial spans both.

Real ranks (gloo over loopback), real Dask tasks pinned per part; the network-namespace hosts
test (tests/cluster/test_netns_wide.py) does the same across hosts.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import optuna
import pytest

from search.session.runner import RunOptions, run_campaign
from search.spec.campaign_spec import SpecError, parse_spec
from tests.campaign_storage import load

HERE = Path(__file__).resolve().parents[1]  # tests/search: the helper trainers

SPEC = """
[study]
name = "wide"
direction = "maximize"
metric = "score"
sampler = "random"
seed = 5
n_trials = {n}
max_retries = 0
{study_extra}

[trainer]
entry = "wide_trainers:{entry}"
epochs = {epochs}
device = "cpu"
data_parallel = 2
options = {{ sleep = {sleep}, marks = "{marks}" }}

[space]
quality = {{ type = "float", low = 0.0, high = 1.0 }}

[cluster]
n_workers = 2
slots_per_worker = 1
"""


def _spec(tmp_path: Path, entry: str, n: int = 2, epochs: int = 3, sleep: float = 0.2, study_extra: str = ""):
    marks = tmp_path / "marks"
    marks.mkdir(exist_ok=True)
    text = SPEC.format(n=n, entry=entry, epochs=epochs, sleep=sleep, marks=marks, study_extra=study_extra)
    return parse_spec(tomllib.loads(text), str(tmp_path / "wide.toml"), text), marks


def _run(spec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    folder = run_campaign(spec, RunOptions(runs_dir=tmp_path / "runs", progress=False))
    return folder, load(folder.root, "wide").get_trials()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def _rank_pids(marks: Path) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for path in marks.glob("rank*-*"):
        rank, pid = path.name[4:].split("-")
        out.setdefault(int(rank), []).append(int(pid))
    return out


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_trial_twice_a_workers_width_spans_both_with_one_seed_and_a_log_and_timings_per_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, marks = _spec(tmp_path, "epochs")
    folder, trials = _run(spec, tmp_path, monkeypatch)
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 2, [
        (t.user_attrs.get("fail_reason"), t.user_attrs.get("error")) for t in trials
    ]
    for trial in trials:
        ranks = trial.user_attrs["ranks"]
        assert [r["rank"] for r in ranks] == [0, 1]
        assert len({r["worker"] for r in ranks}) == 2, "each rank on its own worker"
        assert {r["seed"] for r in ranks} == {trial.user_attrs["seed"]}, "every rank has the trial's seed"
        assert {r["master"] for r in ranks} == {"127.0.0.1"}, "the rendezvous is rank 0's worker's host"
        assert trial.user_attrs["worker"] == ranks[0]["worker"]
        assert all(len(r["epoch_seconds"]) == 3 and all(s > 0 for s in r["epoch_seconds"]) for r in ranks)
        sums = [m["rank_sum"] for _step, m in trial.user_attrs["history"]]
        assert sums == [3.0] * 3, sums  # each epoch's all-reduce saw both ranks (1 + 2)
        for rank in (0, 1):
            log = folder.trial(trial.number) / f"rank{rank}.log"
            assert log.exists(), f"rank {rank} of trial {trial.number} has no log of its own"
    assert all(not _alive(pid) for pids in _rank_pids(marks).values() for pid in pids)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_failing_rank_ends_every_rank_on_every_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec, marks = _spec(tmp_path, "rank1_fails", n=1)
    _folder, trials = _run(spec, tmp_path, monkeypatch)
    (trial,) = trials
    assert trial.state == optuna.trial.TrialState.FAIL
    reason = trial.user_attrs.get("fail_reason", "")
    assert "rank 1 fails on purpose" in reason, trial.user_attrs
    assert trial.user_attrs["duration"] < 120, "rank 0 sleeps 300 s: only the abort can have ended it so soon"
    pids = _rank_pids(marks)
    assert sorted(pids) == [0, 1]
    assert all(not _alive(pid) for group in pids.values() for pid in group), "a rank outlived its trial"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_stop_reaches_every_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec, marks = _spec(tmp_path, "epochs", n=1, epochs=200, sleep=0.3, study_extra="trial_timeout = 4")
    _folder, trials = _run(spec, tmp_path, monkeypatch)
    (trial,) = trials
    assert trial.state == optuna.trial.TrialState.PRUNED, trial.user_attrs
    ranks = trial.user_attrs["ranks"]
    done = {len(r["epoch_seconds"]) for r in ranks}
    assert len(ranks) == 2 and len(done) == 1, f"both ranks stop after the same epoch: {done}"
    assert done.pop() < 200


def test_a_width_the_embedded_cluster_can_hold_only_together_is_accepted_and_a_wider_one_refused(
    tmp_path: Path,
) -> None:
    from search.session.preflight import cluster_for

    spec, _marks = _spec(tmp_path, "epochs")
    cluster_for(spec, RunOptions(runs_dir=tmp_path))  # 2 ranks on 2 workers of 1 slot: spans both
    text = spec.text.replace("data_parallel = 2", "data_parallel = 3")
    wide = parse_spec(tomllib.loads(text), str(tmp_path / "wide.toml"), text)
    with pytest.raises(
        SpecError,
        match="trainer.data_parallel: a trial may take 3 CPU slots, but the embedded "
        r"cluster's 2 worker\(s\) have 2 in all \(1 each\)",
    ):
        cluster_for(wide, RunOptions(runs_dir=tmp_path))
