"""``hypersweep reproduce``: a finished digits trial re-runs to the same numbers; a tampered record does not."""

from __future__ import annotations

import json
import math
import re
import sqlite3
import subprocess
from pathlib import Path

import optuna
import pytest

from search.cli import main
from search.reports.reproduce import Check, Reproduction, compare, comparison_text, reproduce_trial
from search.session.runner import RunOptions, run_campaign
from search.spec.campaign_spec import load_spec
from search.store.folder import CampaignFolder
from tests.spec_files import write_spec

DIGITS = """
[study]
name = "digits-repro"
direction = "maximize"
metric = "val_accuracy"
sampler = "random"
seed = 5
n_trials = 2
deterministic = true
storage = "sqlite"    # the tamper test edits the SQLite file directly

[trainer]
entry = "trainers.classifier:fit"
dataset = "digits"
epochs = 2
device = "cpu"

[space]
model = "mlp"
lr = { type = "float", low = 0.01, high = 0.1, log = true }
batch_size = { type = "categorical", choices = [64, 128] }
schedule = "warmup_cosine"
warmup = 0.1
hidden = { type = "int", low = 32, high = 64, step = 32 }

[cluster]
n_workers = 2
"""


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> CampaignFolder:
    tmp = tmp_path_factory.mktemp("digits-repro")
    spec = load_spec(write_spec(tmp / "digits.toml", DIGITS))
    return run_campaign(spec, RunOptions(runs_dir=tmp / "runs", progress=False))


def _tamper(folder: CampaignFolder, trial_id: int, key: str, value: object) -> None:
    """Edit a finished trial's record in the SQLite file (Optuna's API refuses to touch a finished trial)."""
    with sqlite3.connect(folder.sqlite) as db:
        changed = db.execute(
            "UPDATE trial_user_attributes SET value_json = ? WHERE trial_id = ? AND key = ?",
            (json.dumps(value), trial_id, key),
        ).rowcount
    assert changed == 1


def _study(folder: CampaignFolder) -> optuna.Study:
    return optuna.load_study(study_name="digits-repro", storage=f"sqlite:///{folder.sqlite}")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_reproduce_matches_a_finished_trial_exactly(campaign: CampaignFolder, capsys: pytest.CaptureFixture) -> None:
    checkpoint = campaign.trial(0) / "checkpoint.pt"
    before = checkpoint.stat().st_mtime_ns if checkpoint.exists() else None
    assert main(["reproduce", str(campaign.root), "0"]) == 0
    out = capsys.readouterr().out
    assert "comparison: exact (deterministic config on CPU" in out
    assert "MATCH: trial 0 reproduces" in out and "DIFFERS" not in out
    assert "spec.toml sha256" in out and "matches the campaign's record" in out
    # It ran from scratch, in memory: the campaign's checkpoint was neither read for a resume nor rewritten.
    result = reproduce_trial(campaign.root, 0)
    assert {c.where for c in result.checks} == {"final", "step 1", "step 2"}
    assert all(c.reproduced is not None for c in result.checks if c.compared)
    assert result.config["checkpoint_dir"] is None
    assert (checkpoint.stat().st_mtime_ns if checkpoint.exists() else None) == before


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_reproduce_reports_a_tampered_result_and_exits_non_zero(
    campaign: CampaignFolder, capsys: pytest.CaptureFixture
) -> None:
    study = _study(campaign)
    trial = study.trials[1]
    metrics = dict(trial.user_attrs["metrics"])
    metrics["val_accuracy"] = metrics["val_accuracy"] + 1e-9  # the smallest visible edit still counts
    history = [[step, dict(m)] for step, m in trial.user_attrs["history"]]
    history[0][1]["val_loss"] = history[0][1]["val_loss"] * 1.5
    _tamper(campaign, trial._trial_id, "metrics", metrics)
    _tamper(campaign, trial._trial_id, "history", history)
    assert _study(campaign).trials[1].user_attrs["metrics"] == metrics

    assert main(["reproduce", str(campaign.root), "1"]) == 1
    out = capsys.readouterr().out
    assert "MISMATCH: trial 1 does not reproduce its record (2 value(s) differ)" in out
    assert any(line.startswith("final") and "val_accuracy" in line and "DIFFERS" in line for line in out.splitlines())
    assert any(line.startswith("step 1") and "val_loss" in line and "DIFFERS" in line for line in out.splitlines())


@pytest.mark.timeout(60)
def test_reproduce_rejects_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["reproduce", str(tmp_path), "0"]) == 2
    assert "holds no campaign" in capsys.readouterr().err
    assert main(["reproduce", str(tmp_path), "0", "--tolerance", "-1"]) == 2


def test_tolerance_applies_to_every_compared_value() -> None:
    recorded = [(1, {"loss": 1.0, "acc": 0.5, "epoch_seconds": 0.2})]
    rerun = [(1, {"loss": 1.0 + 5e-7, "acc": 0.5, "epoch_seconds": 0.9, "macs": 10.0})]
    checks = compare(recorded, recorded[0][1], rerun, rerun[0][1])
    by = {(c.where, c.metric): c for c in checks}
    assert by[("final", "loss")].ok(1e-6) and not by[("final", "loss")].ok(1e-7)
    assert not by[("final", "loss")].ok(0.0)  # exact mode
    assert by[("step 1", "epoch_seconds")].skipped == "timing" and by[("step 1", "epoch_seconds")].ok(0.0)
    assert by[("step 1", "macs")].skipped == "not recorded"
    missing = compare([(1, {"loss": 1.0}), (2, {"loss": 0.5})], {}, [(1, {"loss": 1.0})], {})
    assert [c.where for c in missing if not c.ok(1e-6)] == ["step 2"]
    assert Check("final", "x", math.nan, math.nan).ok(0.0) and not Check("final", "x", math.nan, 1.0).ok(1.0)


# --- a trainer of the user's own, beside the spec: the printed commands work as printed ---------

OWN_SPEC = """
[study]
name = "own-trainer"
direction = "maximize"
metric = "score"
sampler = "random"
seed = 4
n_trials = 2
deterministic = true

[trainer]
entry = "owntrain.fit:fit"
epochs = 2
device = "cpu"

[space]
quality = { type = "float", low = 0.0, high = 1.0 }

[cluster]
n_workers = 1
"""

OWN_FIT = """
from owntrain.scale import FACTOR


def fit(config, reporter):
    metrics = {}
    for epoch in range(1, config.epochs + 1):
        metrics = {"score": FACTOR * config.params["quality"] * epoch, "epoch": float(epoch)}
        reporter.report(epoch, metrics)
    return metrics
"""


def _user_shell() -> dict[str, str]:
    """A user's shell: hypersweep installed (its commands first on PATH), nothing of the tests on the path."""
    import os
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_CURRENT_TEST")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _sh(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, shell=True, cwd=cwd, env=_user_shell(), capture_output=True, text=True, timeout=120)


def _printed_commands(markdown: str) -> list[str]:
    """The shell commands of the report's Reproduce section, exactly as printed."""
    section = markdown[markdown.index("Reproduce") :]
    return re.findall(r"```sh\n(.*?)\n```", section, flags=re.S)


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_the_printed_commands_work_as_printed_for_a_trainer_beside_the_spec(tmp_path: Path) -> None:
    project = tmp_path / "project"
    package = project / "exp" / "owntrain"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "scale.py").write_text("FACTOR = 2.0\n")
    (package / "fit.py").write_text(OWN_FIT)
    (project / "exp" / "spec.toml").write_text(OWN_SPEC)
    # The user runs the spec from the project folder; the trainer is importable from nowhere but the spec's folder.
    ran = _sh("hypersweep run exp/spec.toml --no-progress", cwd=project)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    folder = project / "runs" / "own-trainer"
    assert _sh(f"hypersweep status {folder}", cwd=tmp_path).returncode == 0
    assert _sh(f"hypersweep report {folder}", cwd=tmp_path).returncode == 0
    commands = _printed_commands((folder / "report" / "report.md").read_text())
    assert [c.split()[:2] for c in commands] == [
        ["sha256sum", str(folder / "spec.toml")],
        ["hypersweep", "run"],
        ["hypersweep", "reproduce"],
        ["hypersweep", "report"],
    ]
    # Each, as printed, from another folder.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for command in commands:
        done = _sh(command, cwd=elsewhere)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        if command.startswith("sha256sum"):
            assert done.stdout.split()[0] == command.split("# expect ")[1].strip()
        if command.startswith("hypersweep reproduce"):
            assert "MATCH" in done.stdout and "over 3 file(s) matches the campaign's record" in done.stdout
    rerun = sorted((elsewhere / "rerun" / "own-trainer").glob("summary.csv"))
    assert [line.split(",")[1] for line in rerun[0].read_text().splitlines()[1:]] == ["COMPLETE"] * 2

    # The trainer's package changed since: reproduce names the file, and the numbers differ.
    (package / "scale.py").write_text("FACTOR = 3.0\n")
    changed = _sh(f"hypersweep reproduce {folder} 0", cwd=elsewhere)
    assert changed.returncode == 1, changed.stdout + changed.stderr
    assert "1 of the trainer's 3 recorded file(s) changed since the campaign ran: owntrain/scale.py" in changed.stdout


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_reproduce_names_what_differs_from_the_campaigns_machine(
    campaign: CampaignFolder, capsys: pytest.CaptureFixture
) -> None:
    """Another machine simulated by editing the record: its CPU capability, its trials' threads, its torch."""
    assert reproduce_trial(campaign.root, 0).machine == ()  # the same machine: nothing to name
    original = campaign.environment.read_text()
    env = json.loads(original)
    here = env["cpu"]["capability"]
    assert here and env["trial_threads"] == 1  # the built-in trainer's default, recorded
    other = "AVX2" if here != "AVX2" else "AVX512"
    env["cpu"]["capability"], env["trial_threads"] = other, 2
    env["packages"]["torch"] = "2.12.0"
    campaign.environment.write_text(json.dumps(env))
    try:
        assert main(["reproduce", str(campaign.root), "0"]) == 0  # the numbers still match here
    finally:
        campaign.environment.write_text(original)
    out = capsys.readouterr().out
    assert f"machine differs: torch's CPU capability {other} in the campaign, {here} here" in out
    assert f"ATEN_CPU_CAPABILITY={other.lower()}" in out
    assert "machine differs: intra-op threads per trial 2 in the campaign, 1 here" in out
    assert "machine differs: torch 2.12.0 in the campaign" in out


def test_a_mismatch_verdict_names_the_machines_differences() -> None:
    result = Reproduction(
        "s", 3, "trainers.classifier:fit", {"deterministic": True, "device": "cpu"}, True, 0.0,
        (Check("final", "val_loss", 0.5, 0.25),),
        machine=("torch's CPU capability AVX2 in the campaign, AVX512 here",),
    )  # fmt: skip
    verdict = comparison_text(result).splitlines()[-1]
    assert verdict == (
        "MISMATCH: trial 3 does not reproduce its record (1 value(s) differ); this machine differs from the "
        "campaign's: torch's CPU capability AVX2 in the campaign, AVX512 here"
    )
