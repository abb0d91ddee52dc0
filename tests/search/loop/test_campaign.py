"""Campaigns on a real 2-process LocalCluster, read back with plain Optuna."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from toy_specs import toy_toml

from search.session.runner import CampaignExistsError, RunOptions, run_campaign
from search.spec.campaign_spec import load_spec
from tests.campaign_storage import load as load_campaign
from tests.spec_files import write_spec

pytestmark = pytest.mark.slow


QUALITIES = [-1.0, 0.25, 0.5, 0.75, 99.0]


def toy_text(
    sleep: float = 0.0, n_trials: int = 5, sampler: str = "grid", qualities: list[float] = QUALITIES, **study: object
) -> str:
    """Five grid trials of the toy trainer on 2 workers, one per quality (-1: the trainer raises; 99: it reports NaN)."""
    return toy_toml(
        "toy",
        n_trials,
        3,
        sampler=sampler,
        seed=3,
        trainer={"options": {"sleep": sleep}},
        space={"quality": {"type": "categorical", "choices": qualities}},
        cluster={"n_workers": 2},
        **study,
    )


def toy_spec(tmp_path: Path, sleep: float = 0.0, **study: object) -> Path:
    return write_spec(tmp_path / "toy.toml", toy_text(sleep, **study))


def load(folder: Path, name: str = "toy") -> optuna.Study:
    return load_campaign(folder, name)


@pytest.mark.timeout(180)
def test_campaign_records_every_trial_complete_or_fail_with_reason(tmp_path: Path) -> None:
    spec = load_spec(toy_spec(tmp_path))
    folder = run_campaign(spec, RunOptions(runs_dir=tmp_path / "runs", progress=False))

    trials = load(folder.root).get_trials()
    assert len(trials) == 5
    by_quality = {t.params["quality"]: t for t in trials}
    for q in (0.25, 0.5, 0.75):
        trial = by_quality[q]
        assert trial.state == optuna.trial.TrialState.COMPLETE
        assert trial.value == pytest.approx(q)
        assert trial.intermediate_values == {1: q / 3, 2: 2 * q / 3, 3: pytest.approx(q)}  # by epoch (dashboard x)
        assert trial.user_attrs["worker"].startswith("tls://127.0.0.1:")  # the embedded cluster authenticates (TLS)
    raised = by_quality[-1.0]
    assert raised.state == optuna.trial.TrialState.FAIL
    assert "this trial fails on purpose" in raised.user_attrs["fail_reason"]
    assert "Traceback" in raised.user_attrs["traceback"]
    assert "fails on purpose" in (folder.trial(raised.number) / "error.log").read_text()
    nan = by_quality[99.0]
    assert nan.state == optuna.trial.TrialState.FAIL
    assert "nan" in nan.user_attrs["fail_reason"]
    # Each trial got its own seed from the study seed and its number, and a metrics stream on disk.
    assert len({t.user_attrs["seed"] for t in trials}) == 5
    lines = (folder.trial(by_quality[0.5].number) / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2, 3]
    assert folder.summary.exists()


@pytest.mark.timeout(180)
def test_run_refuses_an_existing_campaign_folder(tmp_path: Path) -> None:
    spec = load_spec(write_spec(tmp_path / "one.toml", toy_text(n_trials=1)))
    options = RunOptions(runs_dir=tmp_path / "runs", progress=False)
    run_campaign(spec, options)
    with pytest.raises(CampaignExistsError, match="hypersweep resume"):
        run_campaign(spec, options)


@pytest.mark.timeout(180)
def test_slots_are_refilled_and_never_oversubscribed(tmp_path: Path) -> None:
    body = toy_text(0.3, n_trials=6, sampler="random", qualities=[0.25, 0.5, 0.75])
    spec = load_spec(write_spec(tmp_path / "busy.toml", body))
    folder = run_campaign(spec, RunOptions(runs_dir=tmp_path / "runs", progress=False))
    trials = load(folder.root).get_trials()
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials) and len(trials) == 6
    spans = sorted((t.user_attrs["started"], t.user_attrs["finished"]) for t in trials)
    running_at_each_start = [sum(1 for s, e in spans if s <= start < e) for start, _end in spans]
    assert max(running_at_each_start) <= 2, f"{max(running_at_each_start)} trials ran at once on 2 slots"
    # Both slots were used at once (refilled, not one after the other): some trial started while another ran.
    # Read from the trials' own start/finish times, not from how long the campaign took (load-dependent).
    assert max(running_at_each_start) == 2, f"no two trials overlapped: {spans}"
