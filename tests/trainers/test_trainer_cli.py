"""``python -m trainers`` in a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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


def test_diverging_trial_is_one_line_and_exit_1(tmp_path: Path) -> None:
    result = _run(str(_write(tmp_path, lr=1e6)))
    assert result.returncode == 1 and "FloatingPoint" not in result.stderr and "step" in result.stderr
