"""A report of a big campaign: figures drawn as a few artists whatever the number of trials, tables built from
the rows they show, importances from a seeded sample, a storage restored without the garbage collector."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest
from matplotlib.lines import Line2D
from matplotlib.text import Text
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from search.reports import plots
from search.reports.data import MAX_IMPORTANCE_TRIALS, epochs_spent, importance_sample
from search.reports.summary import best_table, state_counts, trials_frame
from search.reports.timing import Span
from search.store import heap, snapshot
from search.store.journal import ControllerJournalStorage, GroupCommitJournal
from search.store.records import Attr, TrialRecord, state_name
from search.store.storage import open_storage

N = plots.MANY_BARS + 500


def _spans(n: int, workers: int = 4) -> list[Span]:
    """``n`` back-to-back runs of 10 s on ``workers`` workers, a second of wait before each."""
    return [
        Span(
            i,
            f"tcp://w{i % workers}:1",
            "",
            10.0 * (i // workers) + 1,
            10.0 * (i // workers) + 10,
            state,
            10.0 * (i // workers),
        )
        for i, state in zip(range(n), ["COMPLETE", "PRUNED", "FAIL"] * n, strict=False)
    ]


def test_the_timeline_of_thousands_of_trials_is_a_path_per_state() -> None:
    drawn = plots.gantt(_spans(N), {})
    assert drawn.figure is not None
    assert len(drawn.figure.axes[0].patches) == 4  # the waits and one per state, not a patch per trial (N of them)
    assert plots.clipped(drawn.figure) == []


def test_trial_numbers_on_a_row_never_overlap_where_slots_of_one_worker_overlap() -> None:
    spans = [Span(i, "tcp://w:1", "", 0.5 * i, 0.5 * i + 10, "COMPLETE") for i in range(40)]  # 20 runs at once
    drawn = plots.gantt(spans, {})
    assert drawn.figure is not None
    ax = drawn.figure.axes[0]
    labels = [t for t in ax.findobj(Text) if t.get_text().isdigit() and t.get_color() == "white"]
    assert 5 < len(labels) < len(spans)  # every run's number would fit its bar, but they would overlap
    renderer = drawn.figure.canvas.get_renderer()  # type: ignore[attr-defined]
    boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
    for left, right in zip(boxes, boxes[1:], strict=False):
        assert left.x1 <= right.x0 + 1, "two trial numbers overlap on one worker's row"


def test_the_timeline_of_a_thousand_workers_keeps_its_height_and_names_some_rows() -> None:
    drawn = plots.gantt(_spans(2000, workers=1000), {})
    assert drawn.figure is not None
    assert drawn.figure.get_figheight() == pytest.approx(0.55 * plots.TALL_ROWS + 2.2)
    assert 0 < len(drawn.figure.axes[0].get_yticks()) <= plots.TALL_ROWS


def test_the_epochs_figure_draws_bars_for_few_trials_and_a_dot_per_trial_for_many() -> None:
    few = plots.epochs_bars([(n, n % 5, "COMPLETE") for n in range(50)], 5)
    assert few.figure is not None and len(few.figure.axes[0].patches) == 1
    many = plots.epochs_bars([(n, n % 5, "PRUNED" if n % 3 else "COMPLETE") for n in range(N)], 5)
    assert many.figure is not None
    ax = many.figure.axes[0]
    assert not ax.patches
    dots = [line for line in ax.get_lines() if line.get_marker() == "s"]
    assert sorted(len(line.get_xdata()) for line in dots) == sorted([len(range(0, N, 3)), N - len(range(0, N, 3))])
    assert all(isinstance(line, Line2D) for line in dots)


def _trial(
    number: int, value: float, state: TrialState = TrialState.COMPLETE, **attrs: object
) -> optuna.trial.FrozenTrial:
    trial = optuna.trial.create_trial(
        state=state,
        value=value if state == TrialState.COMPLETE else None,
        params={"x": value / 10},
        distributions={"x": FloatDistribution(-1e6, 1e6)},
        user_attrs=dict(attrs),
    )
    trial.number = number
    return trial


def _study(values: list[float], directions: tuple[str, ...] = ("maximize",)) -> optuna.Study:
    study = optuna.create_study(directions=list(directions), sampler=optuna.samplers.RandomSampler(seed=0))
    for i, value in enumerate(values):
        state = TrialState.FAIL if i % 7 == 6 else TrialState.COMPLETE
        if len(directions) == 1:
            study.add_trial(_trial(i, value, state))
        else:
            study.add_trial(
                optuna.trial.create_trial(
                    state=state, values=[value, (i * 37) % 11] if state == TrialState.COMPLETE else None
                )
            )
    return study


def _cut(frame: pd.DataFrame, metric: str, direction: str) -> pd.DataFrame:
    """The best rows as cut from the whole trials table: complete ones, sorted stably by ``metric``."""
    done = frame[frame["state"] == "COMPLETE"]
    return done.sort_values(metric, ascending=direction == "minimize", kind="stable")


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_the_best_table_picked_from_the_trials_equals_the_one_cut_from_the_whole_table(direction: str) -> None:
    values = [float(v) for v in np.random.default_rng(5).integers(0, 6, 60)]  # many ties
    study = _study(values, (direction,))
    whole = _cut(trials_frame(study, ("score",)), "score", direction).head(7)
    picked = best_table(study, ("score",), (direction,), k=7)
    assert list(picked["number"]) == list(whole["number"])  # ties broken by trial number, as Optuna's best_trial
    assert list(picked["score"]) == list(whole["score"])
    assert int(picked["number"].iloc[0]) == study.best_trial.number


def test_the_pareto_table_picked_from_the_trials_equals_the_one_cut_from_the_whole_table() -> None:
    study = _study([float(v) for v in range(40)], ("maximize", "minimize"))
    metrics, directions = ("a", "b"), ("maximize", "minimize")
    frame = trials_frame(study, metrics)
    whole = _cut(frame[frame["number"].isin({t.number for t in study.best_trials})], "a", "maximize")
    picked = best_table(study, metrics, directions)
    assert list(picked["number"]) == list(whole["number"]) and len(picked) == len(study.best_trials)


def test_an_empty_or_unfinished_study_gives_an_empty_best_table() -> None:
    assert best_table(optuna.create_study(), ("score",), ("maximize",)).empty
    study = optuna.create_study()
    study.add_trial(_trial(0, 0.0, TrialState.FAIL))
    table = best_table(study, ("score",), ("maximize",))
    assert table.empty and "state" in table.columns


def test_importances_use_every_trial_up_to_the_cap_then_a_seeded_sample_in_trial_order() -> None:
    few = [_trial(i, float(i)) for i in range(100)]
    assert importance_sample(few) == few
    many = [_trial(i, float(i)) for i in range(MAX_IMPORTANCE_TRIALS + 1000)]
    sample = importance_sample(many)
    assert len(sample) == MAX_IMPORTANCE_TRIALS
    assert [t.number for t in sample] == sorted({t.number for t in sample})  # no repeats, in trial order
    assert [t.number for t in importance_sample(many)] == [t.number for t in sample]  # the same at every render


def test_the_last_report_and_the_epochs_spent_read_as_from_the_whole_history() -> None:
    history = [[0, {"epoch": 1, "loss": "nan"}], [1, {"epoch": 2}], ["bad"], [2, {"loss": 0.5}], "torn"]
    record = TrialRecord.of(_trial(0, 1.0, **{Attr.HISTORY: history}))
    assert record.last_report == record.history[-1] == (2, {"loss": 0.5})
    assert epochs_spent(record) == 3.0  # no epoch in the last report: the number of reports
    assert TrialRecord.of(_trial(1, 1.0)).last_report is None and epochs_spent(_trial(1, 1.0)) == 0.0


def test_states_are_counted_without_records_and_an_interrupted_trial_is_named_so() -> None:
    running = _trial(0, 0.0, TrialState.RUNNING, **{Attr.INTERRUPTED: True})
    assert state_name(running) == TrialRecord.of(running).state_name == "INTERRUPTED"
    assert state_name(_trial(1, 0.0, TrialState.RUNNING)) == "RUNNING"
    study = _study([1.0] * 14)
    assert state_counts(study) == {"COMPLETE": 12, "FAIL": 2}


@pytest.mark.parametrize("collecting", [True, False])
def test_a_storage_restored_from_its_snapshot_leaves_the_collector_as_it_found_it(
    tmp_path: Path, collecting: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(snapshot, "MIN_LINES", 50)  # a snapshot of a small journal
    journal = tmp_path / "study.journal"
    writer = ControllerJournalStorage(GroupCommitJournal(journal))
    study = optuna.create_study(storage=writer, sampler=optuna.samplers.RandomSampler(seed=1))
    for i in range(60):  # a line each
        study.add_trial(_trial(i, float(i)))
    assert writer.snapshot()
    was, froze = gc.isenabled(), heap.heap_owned()  # a CLI test run in this process may have set it
    (gc.enable if collecting else gc.disable)()
    gc.unfreeze()
    heap.freeze_after_loads(False)
    try:
        reader = open_storage(f"journal:{journal}")
        assert gc.isenabled() is collecting and gc.get_freeze_count() == 0  # an API user's process: no freeze
        assert len(optuna.load_study(study_name=study.study_name, storage=reader).trials) == 60
        heap.freeze_after_loads()  # as the hypersweep command sets it
        open_storage(f"journal:{journal}")
        assert gc.isenabled() is collecting
        assert gc.get_freeze_count() > 0  # what the restore made is left out of later collections
    finally:
        heap.freeze_after_loads(froze)
        gc.unfreeze()
        (gc.enable if was else gc.disable)()
