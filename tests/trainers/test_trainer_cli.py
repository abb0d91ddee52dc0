"""``python -m trainers`` in a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainers.api import TrialConfig

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-m", "trainers", *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )


def _write(tmp_path: Path, **params: object) -> Path:
    config = TrialConfig(study="cli", number=0, params=params, seed=3, epochs=2, device="cpu")
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(config.to_dict()))
    return path


@pytest.mark.slow
def test_prints_a_json_line_per_epoch_then_the_final_metrics(tmp_path: Path) -> None:
    result = _run(str(_write(tmp_path, lr=0.05)))
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["step"] for line in lines[:-1]] == [1, 2]
    assert lines[-1]["epoch"] == 2.0 and 0.0 <= lines[-1]["val_accuracy"] <= 1.0


def test_bad_config_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for path in (bad, tmp_path / "missing.json"):
        result = _run(str(path))
        assert result.returncode == 2 and result.stdout == ""
        assert len(result.stderr.strip().splitlines()) == 1 and str(path) in result.stderr


def test_unknown_param_or_trainer_is_exit_2(tmp_path: Path) -> None:
    result = _run(str(_write(tmp_path, lr=0.05, lrr=1.0)))
    assert result.returncode == 2 and "lrr" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    result = _run(str(_write(tmp_path, lr=0.05)), "--trainer", "nosuch.module:fit")
    assert result.returncode == 2 and "nosuch" in result.stderr


@pytest.mark.slow
def test_diverging_trial_is_one_line_and_exit_1(tmp_path: Path) -> None:
    result = _run(str(_write(tmp_path, lr=1e6)))
    assert result.returncode == 1 and "FloatingPoint" not in result.stderr and "step" in result.stderr


# --- what a trainer declares (trainers.api.TrainerInfo) -----------------------------------------------------------

USER_TRAINERS = """
from trainers.api import trainer


def plain(config, reporter):
    reporter.report(1, {"loss": 1.0})
    return {"loss": 1.0, "got": float(len(config.params))}


@trainer(accepted_params={"lr"}, reported_metrics={"loss"})
def declared(config, reporter):
    return plain(config, reporter)
"""


def _run_user(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "user_trainers.py").write_text(USER_TRAINERS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    return subprocess.run(
        [sys.executable, "-m", "trainers", *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )


def test_a_declared_user_trainer_refuses_unknown_params_and_an_undeclared_one_takes_any(tmp_path: Path) -> None:
    config = str(_write(tmp_path, lr=0.1, momentum=0.9))
    refused = _run_user(tmp_path, config, "--trainer", "user_trainers:declared")
    assert refused.returncode == 2 and "unknown params ['momentum']" in refused.stderr and "['lr']" in refused.stderr
    taken = _run_user(tmp_path, config, "--trainer", "user_trainers:plain")
    assert taken.returncode == 0, taken.stderr
    assert json.loads(taken.stdout.splitlines()[-1]) == {"loss": 1.0, "got": 2.0}


def test_capabilities_of_reads_declarations_older_attributes_or_nothing() -> None:
    import pytest

    from trainers.api import TrainerInfo, capabilities_of, declare, trainer

    def plain(config, reporter):  # type: ignore[no-untyped-def]
        return {}

    assert capabilities_of(plain) == TrainerInfo(None, None, False)  # unknown: anything goes
    assert capabilities_of(plain).unknown_params(["anything"]) == []

    def older(config, reporter):  # type: ignore[no-untyped-def]
        return {}

    older.accepted_params = {"lr"}  # type: ignore[attr-defined] - the way trainers declared before TrainerInfo
    older.reported_metrics = ["loss"]  # type: ignore[attr-defined]
    assert capabilities_of(older) == TrainerInfo(frozenset({"lr"}), frozenset({"loss"}), False)

    info = TrainerInfo(accepted_params=["lr", "wd"], reported_metrics={"loss"}, supports_pbt=True)
    assert info.accepted_params == frozenset({"lr", "wd"}) and info.unknown_params(["lr", "x", "a"]) == ["a", "x"]
    declared = declare(plain, info)
    assert declared is plain and capabilities_of(plain) is info
    assert plain.accepted_params == frozenset({"lr", "wd"})  # type: ignore[attr-defined] - kept for older readers

    @trainer(reported_metrics=("val_loss",), supports_pbt=True)
    def decorated(config, reporter):  # type: ignore[no-untyped-def]
        return {}

    assert capabilities_of(decorated) == TrainerInfo(None, frozenset({"val_loss"}), True)
    with pytest.raises(TypeError, match="collection of names"):
        TrainerInfo(accepted_params="lr")


def test_the_built_in_classifier_declares_its_capabilities_without_torch_in_the_api() -> None:
    from trainers.api import capabilities_of
    from trainers.classifier import ACCEPTED_PARAMS, fit

    info = capabilities_of(fit)
    assert info.accepted_params == ACCEPTED_PARAMS and info.supports_pbt
    assert {"val_accuracy", "val_loss", "examples", "steps", "epoch"} <= info.reported_metrics  # type: ignore[operator]
