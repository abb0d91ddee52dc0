"""The best trial as status and the report name it: constraints that no trial meets yet, and ties."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.distributions import FloatDistribution

import search
from search.reports.status import _best_lines, status_text
from search.reports.summary import best_trials, ranking
from trainers.api import Reporter, TrialConfig


def _study(rows: list[tuple[float, float | None]], direction: str = "maximize") -> optuna.Study:
    """An in-memory study with one complete trial per (value, constraint value or None)."""
    study = optuna.create_study(direction=direction)
    for value, size in rows:
        trial = study.ask(fixed_distributions={"x": FloatDistribution(0.0, 1.0)})
        if size is not None:
            trial.set_constraint("size", size)
        study.tell(trial, value)
    return study


def test_ties_with_the_best_are_named_and_the_lowest_number_is_best() -> None:
    study = _study([(0.5, None), (0.9, None), (0.7, None), (0.9, None), (0.9, None)])
    ranked, notes = ranking(study, ("maximize",), k=None)
    assert [t.number for t in ranked[:3]] == [1, 3, 4] and ranked[0].number == study.best_trial.number
    assert [t.number for t in best_trials(study, ("maximize",), k=2)] == [1, 3]
    assert notes == ["trials 3, 4 tie with trial 1 at 0.9 (the lowest trial number counts as best, as in Optuna)"]
    single = _study([(0.2, None), (0.1, None), (0.1, None)], direction="minimize")
    assert ranking(single, ("minimize",), k=1)[1] == [
        "trial 2 ties with trial 1 at 0.1 (the lowest trial number counts as best, as in Optuna)"
    ]
    assert ranking(_study([(0.5, None), (0.4, None)]), ("maximize",))[1] == []
    many = _study([(1.0, None)] * 14)
    assert ranking(many, ("maximize",), k=1)[1] == [
        "trials 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 3 more tie with trial 0 at 1 "
        "(the lowest trial number counts as best, as in Optuna)"
    ]


def test_with_constraints_only_feasible_trials_rank_and_the_count_is_said() -> None:
    study = _study([(0.9, 3.0), (0.5, -1.0), (0.4, 0.0)])  # the highest value breaks the constraint
    lines = _best_lines(study, ("score",), ("maximize",))
    assert lines[0].startswith("  best score = 0.5 (trial 1)")
    assert lines[1] == "  2 of 3 complete trial(s) meet the [study] constraints; only they are ranked"


def test_status_does_not_fail_when_no_trial_meets_the_constraints_yet() -> None:
    study = _study([(0.9, 3.0), (0.5, 1.0)])
    with pytest.raises(ValueError, match="No feasible trials"):  # what status called before
        _ = study.best_trial
    lines = _best_lines(study, ("score",), ("maximize",))
    assert lines[0].startswith("  best score = 0.9 (trial 0)")
    assert "no complete trial meets the [study] constraints yet: the best of the 2 infeasible one(s)" in lines[1]


def infeasible_fit(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    metrics = {"score": round(config.params["x"], 1), "over": 1.0}  # every trial breaks the constraint
    reporter.report(1, metrics)
    return metrics


@pytest.mark.slow
def test_a_campaign_whose_trials_all_break_the_constraints_has_a_status_and_a_report(tmp_path: Path) -> None:
    spec = {
        "study": {
            "name": "over",
            "direction": "maximize",
            "metric": "score",
            "n_trials": 3,
            "sampler": "tpe",
            "constraints": ["over"],
        },
        "trainer": {"epochs": 1},
        "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
    }
    result = search.run(spec, trainer=infeasible_fit, runs_dir=tmp_path, n_workers=1, progress=False)
    status = status_text(result.folder)
    assert "no complete trial meets the [study] constraints yet: the best of the 3 infeasible one(s)" in status
    assert "no complete trial meets the [study] constraints yet" in result.summary()  # what `run` prints at the end
    assert result.best_value is None
    assert list(result.best.columns[:4]) == ["number", "state", "score", "over"]  # each constraint's value
    report = result.report()
    text = (Path(report).parent / "report.md").read_text()
    best = text.split("## Best trials", 1)[1].split("\n## ", 1)[0]
    assert "no complete trial meets the [study] constraints yet" in best
    assert "| rank | trial | score | over | seed |" in best  # the constraint's value beside the objective
    history = text.split("## Optimization history and best so far", 1)[1].split("\n## ", 1)[0]
    assert "0 complete, 0 pruned, 0 failed; best none yet; 3 infeasible (hollow, not in the best so far)" in history
    assert "could not be drawn" not in text


def test_the_history_plot_draws_infeasible_trials_hollow_and_leaves_them_out_of_the_best_so_far() -> None:
    from matplotlib.lines import Line2D

    from search.reports import plots

    complete = [(1, 0.3, 1.0), (3, 0.4, 2.0)]
    drawn = plots.optimization_history(complete, [], [], True, "score", (), infeasible=[(0, 0.9), (2, 0.8)])
    assert drawn.figure is not None
    left = drawn.figure.axes[0]
    lines = {str(line.get_label()): line for line in left.get_lines() if isinstance(line, Line2D)}
    assert "infeasible (2): breaks [study] constraints" in lines and "feasible (2)" in lines
    assert max(lines["best so far"].get_ydata()) == 0.4  # 0.9 and 0.8 break the constraints


def test_a_pareto_front_with_no_feasible_trial_says_why_it_is_empty() -> None:
    study = optuna.create_study(directions=["maximize", "minimize"])
    for values, size in (((0.5, 1.0), 1.0), ((0.7, 2.0), -1.0), ((0.4, 3.0), 2.0)):
        trial = study.ask(fixed_distributions={"x": FloatDistribution(0.0, 1.0)})
        trial.set_constraint("size", size)
        study.tell(trial, values)
    directions = ("maximize", "minimize")
    assert _best_lines(study, ("a", "b"), directions) == [
        "  Pareto front: 1 trial(s): [1]",
        "  1 of 3 complete trial(s) meet the [study] constraints; only they are ranked",
    ]
    none = optuna.create_study(directions=["maximize", "minimize"])
    trial = none.ask(fixed_distributions={"x": FloatDistribution(0.0, 1.0)})
    trial.set_constraint("size", 1.0)
    none.tell(trial, (0.5, 1.0))
    assert _best_lines(none, ("a", "b"), directions)[1] == (
        "  no complete trial meets the [study] constraints yet (1 infeasible): no Pareto front"
    )
