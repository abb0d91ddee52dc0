"""Out of memory is information: a real campaign on 2 workers with an injected CUDA OOM (CPU build), and a
worker killed by its nanny for host memory."""

from __future__ import annotations

import tomllib
from pathlib import Path

import optuna
import pytest

from search.session.runner import RunOptions, run_campaign
from search.spec.campaign_spec import parse_spec
from search.store.records import TrialRecord
from tests.campaign_storage import load

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parents[1]  # tests/search: the helper trainers
PRUNED, COMPLETE = optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.COMPLETE

SPEC = """
[study]
name = "oom"
direction = "maximize"
metric = "val_accuracy"
sampler = "{sampler}"
seed = 7
n_trials = 6
max_retries = 2

[trainer]
entry = "oom_trainers:oom_above_fit"
dataset = "digits"
epochs = 1
device = "cpu"
oom_retry = "{oom_retry}"
options = {{ oom_above = 40 }}

[space]
lr = {{ type = "float", low = 1e-2, high = 1e-1, log = true }}
batch_size = {{ type = "categorical", choices = [16, 64, 256] }}
model = "mlp"
hidden = 16

[[enqueue]]
batch_size = 16

[[enqueue]]
batch_size = 64

[[enqueue]]
batch_size = 256

[cluster]
n_workers = 2
slots_per_worker = 1
"""


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sampler: str, oom_retry: str) -> list[TrialRecord]:
    monkeypatch.syspath_prepend(str(HERE))
    text = SPEC.format(sampler=sampler, oom_retry=oom_retry)
    spec = parse_spec(tomllib.loads(text), str(tmp_path / "oom.toml"), text)
    folder = run_campaign(spec, RunOptions(runs_dir=tmp_path, progress=False))
    study = load(folder.root, "oom")
    return [TrialRecord.of(t) for t in study.get_trials()]


def _by_batch(records: list[TrialRecord]) -> dict[int, list[TrialRecord]]:
    groups: dict[int, list[TrialRecord]] = {}
    for r in records:
        groups.setdefault(int(r.params["batch_size"]), []).append(r)
    return groups


@pytest.mark.timeout(400)
def test_an_oom_is_retried_at_half_the_micro_batch_and_else_stored_as_infeasible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = _run(tmp_path, monkeypatch, "tpe", "accumulate")
    groups = _by_batch(records)
    assert len(records) == 6 and set(groups) >= {16, 64, 256}
    for r in groups[16]:
        assert r.state == COMPLETE and "oom_retries" not in (r.metrics or {})
    for r in groups[64]:  # 64 > 40: out of memory, then 2 x 32 with accumulation
        assert r.state == COMPLETE and r.metrics and r.metrics["oom_retries"] == 1 and r.metrics["micro_batch"] == 32
    for r in groups[256]:  # 128 > 40 as well: infeasible, never retried as a worker loss
        assert r.state == PRUNED and r.stop_reason == "out of memory" and r.retries == 0, r
        assert "CUDA out of memory (injected)" in r.out_of_memory
    trials = load(tmp_path / "oom", "oom").get_trials()
    infeasible = {t.number for t in trials if t.constraints.get("out_of_memory", 0) > 0}
    assert infeasible == {r.number for r in groups[256]}  # TPE reads the constraint: it counts them infeasible
    summary = (tmp_path / "oom" / "summary.csv").read_text()
    assert "oom_retries" in summary.splitlines()[0] and "out of memory" in summary


@pytest.mark.timeout(400)
def test_without_the_retry_and_a_sampler_without_constraints_an_oom_is_pruned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = _run(tmp_path, monkeypatch, "random", "none")
    for r in records:
        batch = int(r.params["batch_size"])
        assert (r.state, r.stop_reason) == ((COMPLETE, "") if batch == 16 else (PRUNED, "out of memory")), r
    trials = load(tmp_path / "oom", "oom").get_trials()
    assert not any(t.constraints for t in trials)  # random sampling reads no constraints: PRUNED says it all
