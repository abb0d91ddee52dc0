"""The report fits the page: wide tables scroll inside their section, one architecture string everywhere,
time axes without the idle gaps between the runs of a resumed campaign, integer ticks, labelled digests,
no clipped figure labels. Real campaigns, real figures, a real headless Chromium at 1,400 px."""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import optuna
import pytest
from matplotlib.text import Text

from search.reports import plots
from search.reports.data import CampaignData, history_points, load_campaign, lr_curve
from search.reports.report import write_report
from search.reports.status import status_text
from search.reports.summary import best_table, trial_params
from search.reports.timing import (
    TimeAxis,
    idle_gaps,
    resume_times,
    timeline,
    timeline_origin,
    utilization,
    worker_labels,
)
from search.session.runner import RunOptions, resume_campaign, run_campaign
from search.spec.campaign_spec import load_spec
from search.store.folder import CampaignFolder
from spaces.architecture import genome_from_string
from spaces.genomes import CellSpace
from tests.search.reports.devtools import CHROMIUM, available, open_page
from tests.spec_files import write_spec

WIDTH = 1400

EVOLUTION = """
# Layout test: 2 evolution trials of 1 epoch over CNN layer sequences, then a resume to 4 after an idle gap.
[study]
name = "layout-evolution"
direction = "maximize"
metric = "val_accuracy"
sampler = "evolution"
seed = 4
n_trials = 2

[trainer]
entry = "trainers.classifier:fit"
dataset = "digits"
epochs = 1
device = "cpu"

[space]
arch = { type = "layers", min_depth = 3, max_depth = 4, widths = [8, 16], max_params = 30000 }
optimizer = "adam"
lr = { type = "float", low = 1e-3, high = 3e-2, log = true }
batch_size = 64

[cluster]
n_workers = 2
"""
IDLE_S = 4.0  # the pause between the run and its resume


@pytest.fixture(scope="module")
def evolution(tmp_path_factory: pytest.TempPathFactory) -> CampaignFolder:
    """The one campaign of this module (one campaign, read by every test that takes ``evolution`` or ``resumed``):
    2 evolution trials, a real idle gap, a resume to 4 trials under ``--n-trials 4``, its report."""
    tmp = tmp_path_factory.mktemp("layout-evolution")
    spec = load_spec(write_spec(tmp / "evolution.toml", EVOLUTION))
    folder = run_campaign(spec, RunOptions(runs_dir=tmp / "runs", progress=False))
    time.sleep(IDLE_S)  # a real idle gap: nothing runs until the resume
    resume_campaign(folder.root, RunOptions(runs_dir=tmp / "runs", progress=False, n_trials=4))
    write_report(folder.root)
    return folder


@pytest.fixture(scope="module")
def resumed(evolution: CampaignFolder) -> CampaignFolder:
    """A resumed campaign: the module's evolution campaign (run, idle gap, resume)."""
    return evolution


def _section(page: str, section_id: str) -> str:
    return page.split(f'<section id="{section_id}">')[1].split("</section>")[0]


# --- wide tables ---------------------------------------------------------------------------------

OVERFLOW_PROBE = """(() => {
  const vw = document.documentElement.clientWidth, out = [];
  for (const el of document.body.querySelectorAll('*')) {
    if (el.parentElement.closest('.wide')) continue;  // inside a scroll box: it scrolls there
    const r = el.getBoundingClientRect();
    if (r.width > 0 && (r.left < -1 || r.right > vw + 1)) out.push(el.tagName + ' ' + Math.round(r.right));
  }
  const boxes = Array.from(document.querySelectorAll('.wide')).filter(b => {
    const s = b.closest('section').getBoundingClientRect(), r = b.getBoundingClientRect();
    return r.right > s.right + 1;
  }).length;
  const rows = Array.from(document.querySelectorAll('#best tbody tr')).map(r => r.getBoundingClientRect().height);
  return {vw: vw, scroll: document.documentElement.scrollWidth, over: out.slice(0, 10), boxes: boxes,
          tallest: rows.length ? Math.max(...rows) : 0};
})()"""


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(not available(), reason=f"{CHROMIUM} is not installed (.ci/run installs Debian's chromium)")
def test_an_evolution_report_fits_a_1400_px_page_in_headless_chromium(evolution: CampaignFolder) -> None:
    result = open_page((evolution.report / "index.html").as_uri(), width=WIDTH, probe=OVERFLOW_PROBE)
    fit = result.probe
    assert result.errors == [] and fit["vw"] <= WIDTH
    assert fit["scroll"] <= fit["vw"], f"the page scrolls sideways: {fit}"
    assert fit["over"] == [] and fit["boxes"] == 0, fit
    assert 0 < fit["tallest"] < 80, f"a row of the best table is {fit['tallest']} px tall"


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.skipif(not available(), reason=f"{CHROMIUM} is not installed (.ci/run installs Debian's chromium)")
def test_the_overflow_probe_sees_a_table_wider_than_the_page(tmp_path: Path) -> None:
    cells = "".join(f"<td>column-{i}-value</td>" for i in range(60))
    page = tmp_path / "wide.html"
    page.write_text(f'<section id="best"><table><tbody><tr>{cells}</tr></tbody></table></section>')
    fit = open_page(page.as_uri(), width=WIDTH, probe=OVERFLOW_PROBE).probe
    assert fit["scroll"] > fit["vw"] and fit["over"]


# --- one architecture string ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_architecture_reads_the_same_in_status_the_run_table_and_the_report(evolution: CampaignFolder) -> None:
    data = load_campaign(evolution.root)
    best = data.best(k=1)[0]
    genome = trial_params(best)["arch"]
    assert genome_from_string(genome).to_string() == genome  # the canonical string, not a key=value form
    status = status_text(evolution.root)
    assert f"params arch={genome}," in status and "arch.depth" not in status
    table = best_table(data.study, data.metrics, data.directions)
    assert table.loc[table["number"] == best.number, "params.arch"].item() == genome
    page = (evolution.report / "index.html").read_text()
    best_html = _section(page, "best")
    assert genome.replace("|", "|<wbr>") in best_html and "arch.b0" not in best_html and "arch.depth" not in page
    assert "<th>genome</th>" not in best_html  # the arch column already shows it


def test_a_trial_with_only_flat_architecture_parameters_is_shown_as_its_genome_string(tmp_path: Path) -> None:
    spec = load_spec(
        write_spec(
            tmp_path / "cell.toml",
            """
        [study]
        name = "cell"
        direction = "maximize"
        metric = "val_accuracy"
        [trainer]
        entry = "trainers.classifier:fit"
        [space]
        arch = { type = "cell" }
        lr = { type = "float", low = 1e-3, high = 1e-1, log = true }
    """,
        )
    )
    cells = CellSpace()
    genome = cells.sample(np.random.default_rng(3))
    flat = {"lr": 0.01, **cells.encode(genome, "arch")}
    trial = optuna.trial.create_trial(params=flat, distributions=spec.space.distributions(), value=0.5)
    assert trial_params(trial, spec.space) == {"lr": 0.01, "arch": genome.to_string()}
    assert trial_params(trial) == flat  # without the space nothing can be folded


# --- time axes of a resumed campaign -------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_resumed_campaigns_time_axes_cut_the_real_idle_gap_between_its_runs(resumed: CampaignFolder) -> None:
    data = load_campaign(resumed.root)
    records = data.records()
    gaps = idle_gaps(records, resume_times(data.environment), data.asked_times())
    assert len(gaps) == 1 and gaps[0][1] - gaps[0][0] >= IDLE_S
    origin = timeline_origin(records, data.asked_times())
    assert origin is not None
    axis = data.time_axis(origin)
    spans = timeline(records, data.asked_times())
    wall = max(s.end for s in spans) - min(s.start for s in spans)
    use = utilization(spans, 2, axis)
    assert use["span_s"] == pytest.approx(wall - axis.cut_s) and use["cut_s"] >= IDLE_S
    assert use["utilization"] > use["busy_s"] / (2 * wall)  # run time only: the idle gap is not counted
    drawn = plots.gantt(spans, worker_labels([s.worker for s in spans]), axis)
    assert drawn.figure is not None
    ax = drawn.figure.axes[0]
    assert ax.get_xlim()[1] < wall - IDLE_S + 0.05 * wall  # the axis is as long as the runs, not the pause
    assert any("idle cut" in t.get_text() for t in ax.findobj(Text))  # the cut is marked
    assert "idle gaps between runs cut" in ax.get_xlabel()
    history = history_points(data, 0)
    assert [cut for _at, cut in history.cuts] == [cut for _at, cut in axis.marks()]  # the same gap, cut
    assert max(t for _n, _v, t in history.complete) < wall - IDLE_S
    timeline_html = _section((resumed.report / "index.html").read_text(), "timeline")
    assert "1 idle gap(s) between its runs" in timeline_html


def test_the_time_axis_maps_times_around_a_cut() -> None:
    axis = TimeAxis.since(100.0, [(110.0, 1100.0)])
    assert [axis(t) for t in (0.0, 10.0, 500.0, 1010.0, 1020.0)] == [0.0, 10.0, 10.0, 20.0, 30.0]
    assert axis.cut_s == 990.0 and axis.marks() == [(10.0, 990.0)]


# --- digests -------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_each_spec_digest_of_a_resumed_campaign_says_which_spec_it_is(resumed: CampaignFolder) -> None:
    page = (resumed.report / "index.html").read_text()
    frozen = load_spec(resumed.spec).sha256
    spec = _section(page, "spec")
    assert f"<td>frozen spec.toml sha256</td><td>{frozen} (matches the study" in spec
    environment = _section(page, "environment")
    first = re.search(r"<td>spec sha256 at the first run</td><td>([0-9a-f]{64}) \(([^)]*)\)", environment)
    again = re.search(r"<td>spec sha256 at resume 1 \([^)]*\)</td><td>([0-9a-f]{64}) \(([^)]*)\)", environment)
    assert first and again, environment
    assert first.group(1) != frozen and first.group(2) == "differs from the frozen spec.toml"  # --n-trials 4
    assert again.group(1) == frozen and again.group(2) == "the frozen spec.toml"


# --- figures: integer ticks, nothing clipped -----------------------------------------------------


def _figures_of(data: CampaignData) -> dict[str, plots.Drawn]:
    """Every figure of the report, drawn from the campaign's real records."""
    top = data.best()
    curves = {t.number: lr_curve(data.record(t), True) for t in top}
    points = history_points(data, 0)
    records = data.records()
    spans = timeline(records, data.asked_times())
    origin = timeline_origin(records, data.asked_times())
    assert origin is not None
    reported = {r.number: (r.state.name, [(s, dict(m)) for s, m in r.history]) for r in records}
    return {
        "lr": plots.lr_curves(curves),
        "history": plots.optimization_history(
            points.complete, points.pruned, points.failed, True, data.metrics[0], points.cuts
        ),
        "curves": plots.learning_curves(reported, ["val_accuracy", "train_loss"], [t.number for t in top]),
        "importance": plots.importance_bars({"a long parameter name": 0.7, "lr": 0.3}, data.metrics[0]),
        "epochs": plots.epochs_bars([(r.number, 1.0, r.state.name) for r in records], 1),
        "gantt": plots.gantt(spans, worker_labels([s.worker for s in spans]), data.time_axis(origin)),
        "pareto": plots.pareto(
            [(0.5, 100.0), (0.9, 4000.0)], [(0, 0.5, 100.0), (1, 0.9, 4000.0)], ["val_accuracy", "n_params"]
        ),
    }


def _tick_values(axis: object) -> list[float]:
    lo, hi = axis.get_view_interval()  # type: ignore[attr-defined]
    return [t for t in axis.get_majorticklocs() if min(lo, hi) <= t <= max(lo, hi)]  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_trial_number_and_step_axes_tick_whole_numbers(resumed: CampaignFolder) -> None:
    drawn = _figures_of(load_campaign(resumed.root))
    integer_axes = {
        "history": [drawn["history"].figure.axes[0].xaxis],  # trial number
        "epochs": [drawn["epochs"].figure.axes[0].xaxis, drawn["epochs"].figure.axes[0].yaxis],
        "lr": [drawn["lr"].figure.axes[0].xaxis],
        "curves": [ax.xaxis for ax in drawn["curves"].figure.axes if ax.get_visible()],
    }
    for name, axes in integer_axes.items():
        for axis in axes:
            ticks = _tick_values(axis)
            assert ticks and all(float(t).is_integer() for t in ticks), (name, ticks)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_no_figure_of_the_report_clips_a_label(resumed: CampaignFolder) -> None:
    for name, drawn in _figures_of(load_campaign(resumed.root)).items():
        assert drawn.figure is not None and plots.clipped(drawn.figure) == [], name


def test_the_clipping_check_sees_a_label_outside_the_figure() -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(3, 2))
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=0.01)
    ax = fig.add_subplot()
    ax.plot([1e-4, 1e-2], [1e-4, 1e-2])
    ax.set_yscale("log")
    ax.set_ylabel("learning rate")
    fig.canvas.draw()
    assert "learning rate" in plots.clipped(fig)


def test_log_lr_curves_keep_their_y_label() -> None:
    curves = {n: ([(s, 0.05 * 0.9**s + 1e-4 * n) for s in range(12)], "reported") for n in range(5)}
    drawn = plots.lr_curves(curves)
    assert drawn.figure is not None and drawn.figure.axes[0].get_yscale() == "log"
    assert plots.clipped(drawn.figure) == []


def test_hand_made_pbt_segments_around_a_resume_have_the_gap_between_them_cut() -> None:
    from optuna.trial import TrialState

    from search.store.records import TrialRecord

    member = TrialRecord(
        number=0,
        state=TrialState.COMPLETE,
        params={},
        values=(1.0,),
        started=100.0,
        finished=300.0,
        worker="w1",
        pbt_segments=((100.0, 150.0, "w1"), (250.0, 300.0, "w2")),
    )
    other = TrialRecord(
        number=1, state=TrialState.COMPLETE, params={}, values=(1.0,), started=100.0, finished=140.0, worker="w2"
    )
    asked = {0: 90.0, 1: 95.0}
    assert idle_gaps([member, other], [200.0], asked) == [(150.0, 250.0)]  # the member's own run spans the resume
    assert idle_gaps([member, other], [145.0], asked) == []  # a segment was running then: nothing is cut
    spans = timeline([member, other], asked)
    axis = TimeAxis.since(90.0, [(150.0, 250.0)])
    assert [(s.number, s.worker) for s in spans] == [(0, "w1"), (1, "w2"), (0, "w2")]
    assert utilization(spans, 2, axis)["span_s"] == pytest.approx((300.0 - 100.0) - (250.0 - 150.0))


def test_a_resized_trials_segments_are_drawn_as_runs_labelled_with_their_width() -> None:
    """One segment record holds the runs (no ``pbt_segments``): a span per run, each with its segment's width,
    and the gantt labels a trial that changed width ``N ×k``."""
    from optuna.trial import TrialState

    from search.loop.segments import Segment
    from search.store.records import TrialRecord
    from search.vocab.terms import Transition

    segments = (
        Segment(0, Transition.START, 1, 0, 1, 0, runs=((100.0, 150.0, "w1"),)),
        Segment(1, Transition.RESIZE, 2, 1, 3, 1437, {"lr": 0.02}, runs=((155.0, 300.0, "w1"),)),
    )
    resized = TrialRecord(
        number=4, state=TrialState.COMPLETE, params={}, values=(1.0,), started=155.0, finished=300.0, worker="w1",
        segments=tuple(s.to_record() for s in segments),
    )  # fmt: skip
    other = TrialRecord(
        number=5, state=TrialState.COMPLETE, params={}, values=(1.0,), started=100.0, finished=140.0, worker="w2"
    )
    spans = timeline([resized, other])
    assert [(s.number, s.start, s.end, s.width) for s in spans] == [
        (4, 0.0, 50.0, 1), (4, 55.0, 200.0, 2), (5, 0.0, 40.0, None)
    ]  # fmt: skip
    drawn = plots.gantt(spans, {"w1": "w1", "w2": "w2"})
    assert drawn.figure is not None
    labels = {t.get_text() for t in drawn.figure.axes[0].texts}
    assert {"4 \u00d71", "4 \u00d72", "5"} <= labels, labels
    assert "N \u00d7k: trial N's segment on k slots; a taller bar, more slots" in drawn.legend
