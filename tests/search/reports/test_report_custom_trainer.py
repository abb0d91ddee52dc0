"""The report tells the truth for a user's own trainer, checked in the page a real headless Chromium renders.

A real campaign on a 2-process LocalCluster runs ``toy_trainers:own_lr``: it reports its
own ``lr`` (halved every epoch, not any built-in schedule) and an ``error`` to minimize;
two trials fail and two report errors ten times the others', which a median pruner stops.
The assertions read the rendered text of each section (``innerText``), the table of
contents and the images' sizes, not the HTML source.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest
from optuna.trial import TrialState

from search.cli import main
from search.reports.data import MIN_IMPORTANCE_TRIALS, dataset_of, load_campaign, lr_curve, worker_labels
from search.reports.report import SECTION_IDS
from search.session.runner import RunOptions, run_campaign
from search.spec.campaign_spec import load_spec
from search.store.folder import CampaignFolder
from search.store.records import TrialRecord
from tests.search.reports.devtools import CHROMIUM, PageResult, available, open_page
from tests.spec_files import write_spec

OWN = """
# A user's own trainer: its own lr, an error to minimize, trials pruned and failed.
[study]
name = "own-trainer"
direction = "minimize"
metric = "error"
sampler = "random"
seed = 5
n_trials = 14
pruner = "median"

[pruner]
resource = "epochs"
n_startup_trials = 3

[trainer]
entry = "toy_trainers:own_lr"
epochs = 5
options = { sleep = 0.05, fail = [4, 9], bad = [8, 11] }

[space]
lr = { type = "float", low = 0.01, high = 0.1, log = true }
width = { type = "int", low = 1, high = 8 }
schedule = "cosine"

[cluster]
n_workers = 2
"""
LR_ROW = re.compile(r"^(\d+)\treported by the trainer[^\t]*\t(\d+)\t(\S+)\t(\S+)\t", re.M)


@pytest.fixture(scope="module")
def own_campaign(tmp_path_factory: pytest.TempPathFactory) -> CampaignFolder:
    tmp = tmp_path_factory.mktemp("own-trainer")
    spec = load_spec(write_spec(tmp / "own.toml", OWN))
    folder = run_campaign(spec, RunOptions(runs_dir=tmp / "runs", progress=False))
    assert main(["report", str(folder.root)]) == 0
    return folder


@pytest.fixture(scope="module")
def own_page(own_campaign: CampaignFolder, tmp_path_factory: pytest.TempPathFactory) -> PageResult:
    if not available():
        pytest.skip(f"{CHROMIUM} is not installed (.ci/run installs Debian's chromium)")
    shot = tmp_path_factory.mktemp("own-shot") / "report.png"
    result = open_page((own_campaign.report / "index.html").as_uri(), screenshot=shot)
    print(f"screenshot: {shot}")
    return result


def _records(folder: CampaignFolder) -> list[TrialRecord]:
    return list(load_campaign(folder.root).records())


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_campaign_has_complete_pruned_and_failed_trials(own_campaign: CampaignFolder) -> None:
    states = {r.number: r.state for r in _records(own_campaign)}
    assert len(states) == 14
    assert states[4] == states[9] == TrialState.FAIL
    assert TrialState.PRUNED in {states[8], states[11]}, states  # ten times worse than the median: stopped


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_page_of_a_custom_trainer_tells_the_truth(own_campaign: CampaignFolder, own_page: PageResult) -> None:
    records = _records(own_campaign)
    complete = [r for r in records if r.state == TrialState.COMPLETE]
    pruned = [r for r in records if r.state == TrialState.PRUNED]
    page = own_page
    assert page.errors == [] and page.broken_images == 0
    assert page.title == "hypersweep report: own-trainer"

    # empty sections are left out, and the table of contents lists exactly the sections shown
    assert {"pareto", "scaling"}.isdisjoint(page.section_ids) and "Pareto front" not in page.nav.split("Left out")[0]
    assert page.section_ids == [s for s in SECTION_IDS if s in page.section_ids]
    assert {"spec", "best", "lr", "history", "curves", "pruning", "timeline", "failures"} <= set(page.section_ids)
    assert "Left out, nothing to show" in page.nav and "single-objective" in page.nav and "scaling" in page.nav
    for section, text in page.texts.items():
        assert len(text.strip().splitlines()) >= 2, f"section {section} shows only its heading: {text!r}"
        assert "could not be drawn" not in text, text

    # no dataset for a trainer that is not the built-in one
    assert "digits" not in "\n".join(page.texts.values()) + page.nav
    assert "dataset" not in page.texts["spec"].split("frozen spec.toml")[0]
    assert "toy_trainers:own_lr (your own trainer)" in page.texts["spec"]

    # the optimization history marks pruned and failed trials and draws the best so far
    history = page.texts["history"]
    assert f"{len(complete)} complete, {len(pruned)} pruned, 2 failed" in history
    assert f"pruned ({len(pruned)})" in history and "failed (2)" in history and "best so far" in history

    # the LR section shows what the trainer reported (halved per report), not a rebuilt cosine schedule
    lr_text = page.texts["lr"]
    assert "rebuilt" not in lr_text
    rows = LR_ROW.findall(lr_text)
    assert rows, lr_text
    by_number = {r.number: r for r in records}
    for number, points, first, last in rows:
        record = by_number[int(number)]
        reported = [m["lr"] for _s, m in record.history]
        assert int(points) == len(reported) == 5
        assert float(first) == pytest.approx(record.params["lr"], rel=1e-5)
        assert float(last) == pytest.approx(record.params["lr"] * 0.5**4, rel=1e-5)

    # importances say how many trials they rest on, or why they are skipped
    if len(complete) >= MIN_IMPORTANCE_TRIALS:
        assert f"based on {len(complete)} complete trials" in page.texts["importance"]
    else:
        assert "importance" not in page.section_ids
        assert f"importances skipped: only {len(complete)} complete trial(s)" in page.nav

    # the Gantt chart: a legend, short worker names, the wait before each trial shown apart
    timeline = page.texts["timeline"]
    assert "legend: running, ended complete" in timeline and "running, ended fail" in timeline
    assert "waiting: asked -> started" in timeline and "waiting between being asked and starting" in timeline
    workers = sorted({r.worker for r in records if r.worker})
    for address, label in worker_labels(workers).items():
        assert re.fullmatch(r"w\d :\d+", label) and label in timeline and address in timeline

    # learning curves: large, with the best trials named
    curves = next(f for f in page.figures if f["alt"] == "learning curves")
    assert curves["width"] >= 1000 and curves["height"] >= 400 and curves["shown"] >= 900
    best = min(complete, key=lambda r: r.values[0])  # type: ignore[index]
    assert f"trial {best.number} (#1)" in page.texts["curves"]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_reported_lr_is_plotted_and_only_the_builtin_trainer_gets_a_rebuilt_one(
    own_campaign: CampaignFolder,
) -> None:
    record = next(r for r in _records(own_campaign) if r.state == TrialState.COMPLETE)
    points, source = lr_curve(record, builtin=False)
    assert source == "reported" and [s for s, _ in points] == [1, 2, 3, 4, 5]
    assert [lr for _s, lr in points] == pytest.approx([record.params["lr"] * 0.5**k for k in range(5)])
    assert lr_curve(record, builtin=True)[1] == "reported"  # reported wins even for the built-in trainer
    silent = dataclasses.replace(
        record, recorded_history=tuple([s, {k: v for k, v in m.items() if k != "lr"}] for s, m in record.history)
    )
    assert lr_curve(silent, builtin=False) == ([], "")  # no lr and not the built-in trainer: nothing to plot
    rebuilt, how = lr_curve(silent, builtin=True)
    assert how == "rebuilt" and rebuilt and all(math.isfinite(v) for _s, v in rebuilt)


def test_a_dataset_is_named_only_where_it_is_known(tmp_path: Path) -> None:
    own = load_spec(write_spec(tmp_path / "own.toml", OWN), check_trainer=False)
    assert own.trainer.dataset == "digits" and dataset_of(own) is None  # the spec's default, which own_lr ignores
    told = OWN.replace('entry = "toy_trainers:own_lr"', 'entry = "toy_trainers:own_lr"\ndataset = "my-images"')
    assert dataset_of(load_spec(write_spec(tmp_path / "told.toml", told), check_trainer=False)) == "my-images"
    builtin = "[study]\nname = 'b'\nmetric = 'val_accuracy'\ndirection = 'maximize'\n[space]\nlr = 0.1\n"
    assert dataset_of(load_spec(write_spec(tmp_path / "b.toml", builtin), check_trainer=False)) == "digits"


def test_worker_labels_are_short() -> None:
    assert worker_labels(["tls://127.0.0.1:4100", "tls://127.0.0.1:39"]) == {
        "tls://127.0.0.1:39": "w1 :39",
        "tls://127.0.0.1:4100": "w2 :4100",
    }
    assert worker_labels(["tcp://gpu-node-7.cluster.example.org:4000", "tcp://10.0.0.2:5"]) == {
        "tcp://10.0.0.2:5": "w1 10.0.0.2:5",
        "tcp://gpu-node-7.cluster.example.org:4000": "w2 gpu-node-7:4000",
    }
