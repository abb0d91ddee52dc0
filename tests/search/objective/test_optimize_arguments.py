"""``search.optimize``'s arguments become the campaign's ``[study]`` table, each mistake one line naming it (no
cluster starts for a mistake)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import search
from search.objective_api import _study_table
from spaces.errors import InputError


def objective(trial: Any) -> float:
    return trial.suggest_float("x", 0.0, 1.0)


def table(**given: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "n_trials": 5,
        "timeout": None,
        "study_name": None,
        "direction": None,
        "directions": None,
        "metric_names": None,
        "seed": 0,
        "storage": "",
    }
    return _study_table(objective, **{**arguments, **given})


def test_the_study_table_as_optuna_names_things() -> None:
    assert table() == {"name": "objective", "n_trials": 5, "seed": 0, "direction": "minimize", "metric": "value"}
    multi = table(directions=["maximize", "minimize"], timeout=30, study_name="mine", storage="sqlite")
    assert multi["directions"] == ["maximize", "minimize"] and multi["metrics"] == ["values_0", "values_1"]
    assert multi["time_budget"] == 30.0 and multi["name"] == "mine" and multi["storage"] == "sqlite"
    assert _study_table(lambda t: 0.0, 1, None, None, None, None, None, 0, "")["name"] == "objective"


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"n_trials": 0}, "n_trials=0: must be an int >= 1"),
        ({"timeout": -1}, "timeout=-1: must be a number of seconds > 0"),
        ({"direction": "minimize", "directions": ["minimize"]}, "either direction= or directions="),
        ({"metric_names": ["a", "b"]}, "one name per direction (1)"),
    ],
)
def test_a_mistake_is_one_line_naming_the_argument(given: dict[str, Any], words: str) -> None:
    with pytest.raises(InputError) as caught:
        table(**given)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_no_objective_no_campaign(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="must be a function objective"):
        search.optimize("objective", runs_dir=tmp_path)  # type: ignore[arg-type]
    assert not (tmp_path / "objective").exists()
