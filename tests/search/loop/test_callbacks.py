"""Callbacks after each tell (Optuna's ``callback(study, frozen_trial)``) and a hook on each report, in real
campaigns; ``study.stop()`` or :class:`search.StopCampaign` from either ends the campaign cleanly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState
from toy_specs import toy_spec

import search


def spec(name: str, n_trials: int = 4) -> dict[str, Any]:
    return toy_spec(name, n_trials, epochs=3, seed=2, parallelism=1)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_callbacks_see_every_told_trial_and_the_report_hook_every_report(tmp_path: Path) -> None:
    told: list[tuple[int, str, float | None]] = []
    reports: list[tuple[int, int, dict[str, float]]] = []

    def callback(study: optuna.Study, trial: FrozenTrial) -> None:
        assert isinstance(study, optuna.Study) and trial.state.is_finished()
        told.append((trial.number, trial.state.name, trial.value))

    result = search.run(
        spec("hooks"),
        callbacks=[callback],
        runs_dir=tmp_path,
        progress=False,
        on_report=lambda number, step, metrics: reports.append((number, step, metrics)),
    )
    trials = result.study.get_trials(deepcopy=False)
    assert sorted(told) == sorted((t.number, t.state.name, t.value) for t in trials)
    assert len(reports) == 4 * 3 and {r[1] for r in reports} == {1, 2, 3}
    history = result.history
    kept = {(int(r.trial), int(r.step), r.metric): r.value for r in history.itertuples()}
    assert all(kept[(n, s, "score")] == m["score"] for n, s, m in reports)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["study.stop", "StopCampaign"])
def test_a_callback_ends_the_campaign_cleanly(tmp_path: Path, how: str) -> None:
    def stop_after_two(study: optuna.Study, trial: FrozenTrial) -> None:
        if len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))) >= 2:
            if how == "study.stop":
                study.stop()
            else:
                raise search.StopCampaign("two are enough")

    result = search.run(
        spec(f"stop-{how.replace('.', '-')}", n_trials=20),
        callbacks=[stop_after_two],
        runs_dir=tmp_path,
        progress=False,
    )
    trials = result.study.get_trials(deepcopy=False)
    assert 2 <= len(trials) < 20
    assert all(t.state.is_finished() for t in trials)  # none left RUNNING: trials in flight finished
    assert len([t for t in trials if t.state == TrialState.COMPLETE]) >= 2


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_failing_report_hook_stops_the_campaign_and_search_run_raises_it(tmp_path: Path) -> None:
    def broken(number: int, step: int, metrics: dict[str, float]) -> None:
        raise KeyError("the user's bug")

    with pytest.raises(KeyError, match="the user's bug"):
        search.run(spec("broken-hook", n_trials=20), on_report=broken, runs_dir=tmp_path, progress=False)
    done = search.load(tmp_path / "broken-hook")
    trials = done.study.get_trials(deepcopy=False)
    assert len(trials) < 20 and all(t.state.is_finished() for t in trials)


def test_a_callback_must_be_callable(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="callbacks\\[0\\]"):
        search.run(spec("not-callable"), callbacks=["print"], runs_dir=tmp_path, progress=False)  # type: ignore[list-item]
