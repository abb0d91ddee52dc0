"""The report's elastic section and the timeline's width per segment, on hand-made trial records (the real
campaigns' checks are in tests/search/loop/test_elastic_growth.py and tests/test_examples.py)."""

from __future__ import annotations

import math

import pytest
from optuna.trial import TrialState

from search.loop.segments import Segment
from search.reports import plots
from search.reports.elastic_segments import resized, segment_paces
from search.reports.timing import BAR_HEIGHT, bar_heights, timeline
from search.store.records import TrialRecord
from search.vocab.terms import Transition

N = 1000  # examples per epoch


def report(epoch: int, seconds: float, noise: float | None = None) -> dict[str, float]:
    metrics = {"epoch": float(epoch), "examples": float(N * epoch), "epoch_seconds": seconds}
    return metrics if noise is None else {**metrics, "b_simple": noise}


def grown(history: list[dict[str, float]], last_runs: tuple[tuple[float, float, str], ...]) -> TrialRecord:
    """A trial grown 1 -> 2 -> 4 with batch = "grow" (linear rule, lr 0.01 at batch 32), 4 epochs planned."""
    segments = (
        Segment(0, Transition.START, 1, 0, 1, 0, runs=((100.0, 110.0, "w1"),)),
        Segment(1, Transition.RESIZE, 2, 1, 2, N, {"batch_size": 64, "lr": 0.02}, runs=((111.0, 116.0, "w1"),)),
        Segment(2, Transition.RESIZE, 4, 2, 4, 2 * N, {"batch_size": 128, "lr": 0.04}, runs=last_runs),
    )
    config = {
        "study": "s", "number": 3, "seed": 1, "epochs": 4, "data_parallel": 4,
        "params": {"lr": 0.04, "batch_size": 128}, "base_params": {"lr": 0.01, "batch_size": 32},
    }  # fmt: skip
    return TrialRecord(
        number=3, state=TrialState.COMPLETE, params={"lr": 0.01}, values=(0.9,), config=config,
        started=100.0, finished=130.0, worker="w1", recorded_history=tuple((m["epoch"], m) for m in history),
        segments=tuple(s.to_record() for s in segments),
    )  # fmt: skip


def test_each_segment_has_its_width_batch_lr_throughput_efficiency_and_goodput() -> None:
    noise = 96.0  # B_noise: efficiency (96 + 32) / (96 + B)
    record = grown(
        [report(1, 4.0, noise), report(2, 2.5, noise), report(3, 1.0, noise), report(4, 1.0, noise)],
        ((117.0, 119.0, "w1"), (120.0, 124.0, "w2")),  # the last segment retried: both runs count
    )
    first, second, last = segment_paces(record)
    assert [(p.index, p.transition, p.width, p.start_epoch, p.end_epoch) for p in (first, second, last)] == [
        (0, "start", 1, 0, 1), (1, "resize", 2, 1, 2), (2, "resize", 4, 2, 4)
    ]  # fmt: skip
    assert [(p.batch, p.lr) for p in (first, second, last)] == [(32, 0.01), (64, 0.02), (128, 0.04)]
    assert [p.examples for p in (first, second, last)] == [N, N, 2 * N]  # to the trial's last report
    assert [p.examples_per_second for p in (first, second, last)] == [N / 10, N / 5, 2 * N / 6]  # over its runs
    assert [p.training_per_second for p in (first, second, last)] == [N / 4, N / 2.5, 2 * N / 2.0]  # its epochs
    assert [p.efficiency for p in (first, second, last)] == pytest.approx([1.0, 128 / 160, 128 / 224])
    assert last.goodput == pytest.approx(1000 * 128 / 224) and last.goodput_per_slot == pytest.approx(last.goodput / 4)


def test_a_pruned_trials_last_segment_ends_at_its_last_report_and_no_noise_takes_the_first_batch() -> None:
    record = grown([report(1, 4.0), report(2, 2.5), report(3, 1.0)], ((117.0, 119.0, "w1"),))
    *_, last = segment_paces(record)
    assert (last.end_epoch, last.examples, last.examples_per_second) == (3, N, N / 2)
    assert last.efficiency == pytest.approx((32 + 32) / (32 + 128))  # B_noise not measured: taken as B0 = 32


def test_an_epoch_without_its_time_leaves_the_training_rate_out() -> None:
    untimed = {"epoch": 4.0, "examples": 4.0 * N}
    *_, last = segment_paces(grown([report(1, 4.0), report(2, 2.5), report(3, 1.0), untimed], ((117.0, 119.0, "w1"),)))
    assert last.training_per_second is None and last.throughput == last.examples_per_second == N
    assert not math.isnan(last.goodput or math.nan)


def test_only_trials_that_changed_width_are_resized() -> None:
    record = grown([report(1, 4.0)], ((117.0, 119.0, "w1"),))
    steady = TrialRecord(
        number=4, state=TrialState.COMPLETE, params={}, values=(0.5,),
        segments=tuple(
            Segment(i, Transition.CONTINUE if i else Transition.START, 2, i, i + 1, 0).to_record() for i in range(2)
        ),
    )  # fmt: skip
    plain = TrialRecord(number=5, state=TrialState.COMPLETE, params={}, values=(0.5,))
    assert [r.number for r in resized([steady, record, plain])] == [3]
    assert segment_paces(plain) == []


def test_the_timeline_draws_a_wider_segment_as_a_taller_bar() -> None:
    record = grown([report(1, 4.0)], ((117.0, 130.0, "w2"),))
    other = TrialRecord(
        number=5, state=TrialState.PRUNED, params={}, values=None, started=100.0, finished=108.0, worker="w2"
    )
    spans = timeline([record, other])
    assert [(s.number, s.width) for s in spans] == [(3, 1), (3, 2), (5, None), (3, 4)]  # by worker, then start
    heights = bar_heights(spans)  # log2 of the width: 1 a third of the widest's, 2 two thirds
    assert list(heights) == pytest.approx([BAR_HEIGHT / 3, 2 * BAR_HEIGHT / 3, BAR_HEIGHT / 3, BAR_HEIGHT])
    assert list(bar_heights([s for s in spans if s.width != 4 and s.width != 2])) == [BAR_HEIGHT] * 2  # one width
    drawn = plots.gantt(spans, {"w1": "w1", "w2": "w2"})
    assert drawn.figure is not None
    ax = drawn.figure.axes[0]
    drawn_heights = {round(p.get_path().get_extents().height, 3) for p in ax.patches}
    assert {round(h, 3) for h in heights} <= drawn_heights
    assert "N \u00d7k: trial N's segment on k slots; a taller bar, more slots" in drawn.legend
    assert {"3 \u00d71", "3 \u00d72", "3 \u00d74"} <= {t.get_text() for t in ax.texts}
