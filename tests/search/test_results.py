"""Results as a notebook reads them: every final metric, the trial's folder, the long history, re-runnable
cells (``exist_ok``), the Python-facing error, ``dir(search)``, and ties for "best" broken as Optuna does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import pytest
from toy_specs import toy_spec

import search
from search.reports.summary import best_table


def spec(name: str, n_trials: int = 2) -> dict[str, Any]:
    return toy_spec(name, n_trials)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_trials_history_and_re_runnable_cells(tmp_path: Path) -> None:
    result = search.run(spec("read"), runs_dir=tmp_path, progress=False)
    table = result.trials
    assert {"score", "epoch", "examples", "steps", "folder", "checkpoint"} <= set(table.columns)
    assert (table["examples"] == 200.0).all() and (table["epoch"] == 2.0).all()  # final metrics, not only score
    assert [Path(f) for f in table["folder"]] == [result.folder / "trials" / str(n) for n in table["number"]]
    assert table["checkpoint"].isna().all()  # the toy trainer writes none
    history = result.history
    assert list(history.columns) == ["trial", "step", "metric", "value", "time"]
    assert len(history) == 2 * 2 * 4 and pd.api.types.is_datetime64_any_dtype(history["time"])
    score = history[(history["trial"] == 0) & (history["metric"] == "score")].set_index("step")["value"]
    assert score[2] == pytest.approx(result.study.trials[0].value)

    with pytest.raises(search.CampaignExistsError) as caught:
        search.run(spec("read"), runs_dir=tmp_path, progress=False)
    assert f"search.resume('{result.folder}')" in str(caught.value) and "exist_ok" in str(caught.value)
    more = spec("read", n_trials=3)
    resumed = search.run(more, runs_dir=tmp_path, progress=False, exist_ok="resume")
    assert [t.number for t in resumed.study.trials] == [0, 1]  # resumed under its frozen spec: budget 2, done
    fresh = search.run(more, runs_dir=tmp_path, progress=False, exist_ok="overwrite")
    assert len(fresh.study.trials) == 3 and "n_trials = 3" in (fresh.folder / "spec.toml").read_text()
    with pytest.raises(ValueError, match="exist_ok='sometimes'"):
        search.run(more, runs_dir=tmp_path, exist_ok="sometimes")


def test_dir_search_shows_the_python_api_before_first_use() -> None:
    code = "import search; print(sorted(set(dir(search)) & {'run', 'resume', 'load', 'Result', 'StopCampaign'}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "['Result', 'StopCampaign', 'load', 'resume', 'run']"
    assert {"run", "resume", "load", "Result"} <= set(search.__all__)


def test_ties_for_best_are_broken_as_optuna_breaks_them() -> None:
    """Many ties (an unstable sort would reorder them): the report's best is Optuna's best_trial, then by number."""
    study = optuna.create_study(direction="maximize")
    for i in range(40):
        study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=(i * 7) % 3 / 2))
    table = best_table(study, ("score",), ("maximize",))
    assert int(table["number"].iloc[0]) == study.best_trial.number == 2
    assert list(table["number"]) == [2, 5, 8, 11, 14]
