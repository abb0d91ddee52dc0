"""The study report: files, sections, escaping, and the page in a real headless Chromium.

The browser part: ``tests/search/reports/devtools.py``, a tiny Chrome DevTools Protocol client.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState

from search.cli import main
from search.reports.report import SECTION_IDS, write_report
from search.session.runner import RunOptions, load_study, run_campaign
from search.spec.campaign_spec import load_spec
from search.store.environment import capture_environment, cluster_shape, record_environment, trainer_source_sha256
from search.store.folder import CampaignFolder
from search.store.records import (
    CONTROLLER_FILES,
    TRIAL_ATTRS,
    Attr,
    Files,
    TrialRecord,
    append_metrics_line,
    encode_history,
    write_attrs,
)
from search.store.storage import flusher
from tests.search.reports.devtools import CHROMIUM, available, open_page
from tests.search.toy_specs import toy_toml
from tests.spec_files import write_spec

# --- a real digits campaign ------------------------------------------------------------------

DIGITS = """
# Report test: 3 digits trials of 2 epochs.
[study]
name = "digits-report"
direction = "maximize"
metric = "val_accuracy"
sampler = "random"
seed = 11
n_trials = 3

[trainer]
entry = "trainers.classifier:fit"
dataset = "digits"
epochs = 2
device = "cpu"

[space]
model = "mlp"
lr = { type = "float", low = 0.01, high = 0.1, log = true }
batch_size = { type = "categorical", choices = [64, 128] }
schedule = { type = "categorical", choices = ["cosine", "warmup_cosine"] }
warmup = 0.1
hidden = { type = "int", low = 32, high = 64, step = 32 }

[cluster]
n_workers = 2
"""


DIGITS_SHOWN = (
    "spec",
    "best",
    "lr",
    "history",
    "curves",
    "pruning",
    "timeline",
    "cost",
    "cost_value",
    "environment",
    "reproduce",
)


@pytest.fixture(scope="module")
def digits_report(tmp_path_factory: pytest.TempPathFactory) -> CampaignFolder:
    tmp = tmp_path_factory.mktemp("digits-report")
    spec = load_spec(write_spec(tmp / "digits.toml", DIGITS))
    folder = run_campaign(spec, RunOptions(runs_dir=tmp / "runs", progress=False))
    assert main(["report", str(folder.root)]) == 0
    return folder


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_campaign_records_its_environment_at_start(digits_report: CampaignFolder) -> None:
    env = json.loads(digits_report.environment.read_text())
    assert env["cluster"]["workers"] == 2 and env["cluster"]["resources"] == {"CPU": 2.0}
    assert env["torch"]["version"] and env["packages"]["optuna"] == optuna.__version__
    assert env["study"] == {
        "name": "digits-report",
        "seed": 11,
        "spec_sha256": load_spec(digits_report.spec).sha256,
        "deterministic": False,
    }
    assert env["trainer"]["source_sha256"] == trainer_source_sha256("trainers.classifier:fit")["source_sha256"]
    assert env["trainer"]["source"].endswith("trainers/classifier.py")
    # what a trial's floating point depends on beyond its seed: torch's CPU kernels and the threads per trial
    assert env["cpu"]["capability"] in ("DEFAULT", "AVX2", "AVX512") and env["trial_threads"] == 1
    page = (digits_report.report / "index.html").read_text()
    assert f"{env['cpu']['capability']} ({env['cpu']['capability_source']})" in page
    assert "1, set by the trainer" in page


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_report_writes_every_file_and_section(digits_report: CampaignFolder) -> None:
    out = digits_report.report
    page = (out / "index.html").read_text()
    for section in DIGITS_SHOWN:
        assert f'<section id="{section}">' in page
    for section in set(SECTION_IDS) - set(DIGITS_SHOWN):  # nothing to show: left out, and said why
        assert f'<section id="{section}">' not in page and f'href="#{section}"' not in page
    assert "importances skipped: only 3 complete trial(s), fewer than the 10" in page
    assert "single-objective study has no Pareto front" in page and "no trial failed" in page
    spec = page.split('<section id="spec">')[1].split("</section>")[0]
    assert "<td>dataset</td><td>digits</td>" in spec  # the built-in trainer's dataset is known
    lr = page.split('<section id="lr">')[1].split("</section>")[0]
    assert "reported by the trainer" in lr and "rebuilt" not in lr  # the built-in trainer reports its lr
    assert load_spec(digits_report.spec).sha256 in page
    assert page.count("data:image/png;base64,") >= 5  # lr schedules, history, curves, importances, epochs, gantt
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", page), "the report must not load anything"
    assert "<script" not in page
    assert f"hypersweep reproduce {digits_report.root}" in page
    frame = pd.read_csv(out / "trials.csv")
    assert len(frame) == 3 and set(frame["state"]) == {"COMPLETE"}
    assert {"number", "val_accuracy", "seed", "worker", "epochs", "params.lr"} <= set(frame.columns)
    assert list(frame["epochs"]) == [2.0, 2.0, 2.0]
    parquet = pd.read_parquet(out / "trials.parquet")
    assert list(parquet["number"]) == list(frame["number"])
    md = (out / "report.md").read_text()
    assert md.count("\n## ") == len(DIGITS_SHOWN) and "Left out, nothing to show" in md
    assert "utilization" in page


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.skipif(not available(), reason=f"{CHROMIUM} is not installed (.ci/run installs Debian's chromium)")
def test_report_opens_in_headless_chromium_without_console_errors(
    digits_report: CampaignFolder, tmp_path: Path
) -> None:
    shot = tmp_path / "report.png"
    result = open_page((digits_report.report / "index.html").as_uri(), screenshot=shot)
    assert result.errors == []
    assert result.section_ids == list(DIGITS_SHOWN)
    assert result.title == "hypersweep report: digits-report"
    assert result.images >= 5 and result.broken_images == 0
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    print(f"screenshot: {shot}")


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.skipif(not available(), reason=f"{CHROMIUM} is not installed (.ci/run installs Debian's chromium)")
def test_the_browser_check_sees_console_errors(tmp_path: Path) -> None:
    page = tmp_path / "bad.html"
    page.write_text('<section id="a"></section><img src="missing.png"><script>console.error("boom"); nope();</script>')
    result = open_page(page.as_uri())
    assert any("boom" in e for e in result.errors)
    assert any("nope is not defined" in e for e in result.errors)
    assert any("missing.png" in e for e in result.errors)


# --- a hand-made campaign: multi-objective, failures, scaling, hostile text --------------------

# The toy trainer, two objectives, a categorical whose choice is HTML (the report must escape it).
TOY_MO = toy_toml(
    "toy-mo",
    n_trials=6,
    epochs=3,
    direction=None,
    metric=None,
    directions=["maximize", "minimize"],
    metrics=["score", "steps"],
    space={
        "quality": {"type": "float", "low": 0.0, "high": 1.0},
        "tag": {"type": "categorical", "choices": ["<b>bold</b>", "plain"]},
    },
    cluster={"n_workers": None},
)
HOSTILE = "<script>alert('x')</script>"


def _hand_made_campaign(root: Path) -> CampaignFolder:
    """A campaign folder written with Optuna's API, as the controller would (no cluster)."""
    folder = CampaignFolder(root)
    root.parent.mkdir(parents=True)
    spec = load_spec(write_spec(root.parent / "toy-mo.toml", TOY_MO))
    folder.create(spec.text)
    study = load_study(spec, folder, create=True)
    info = {
        "address": "tcp://127.0.0.1:1",
        "workers": {
            f"tcp://127.0.0.1:{p}": {"name": i, "host": "127.0.0.1", "nthreads": 1, "resources": {"CPU": 1}}
            for i, p in enumerate((2, 3))
        },
    }
    record_environment(folder.environment, capture_environment(info, spec))
    t0 = 1_700_000_000.0
    for n in range(6):
        trial = study.ask()
        quality = trial.suggest_float("quality", 0.0, 1.0)
        tag = trial.suggest_categorical("tag", ["<b>bold</b>", "plain"])
        history = [[e, {"score": quality * e / 3, "steps": float(e), "epoch": float(e)}] for e in (1, 2, 3)]
        attrs = {
            "seed": n,
            "worker": f"tcp://127.0.0.1:{2 + n % 2}",
            "started": t0 + n,
            "finished": t0 + n + 1.5,
            "history": history,
            "metrics": history[-1][1],
            "config": {"params": {"quality": quality, "tag": tag}},
        }
        attrs["genome"] = f"conv3x3-{n} > pool > dense-64"
        write_attrs(trial, **attrs)
        if n == 4:
            write_attrs(
                trial,
                fail_reason=f"ValueError: {HOSTILE}",
                traceback=f"Traceback (most recent call last):\n  ...\nValueError: {HOSTILE}",
            )
            study.tell(trial, state=TrialState.FAIL)
        else:
            study.tell(trial, [quality, 3.0 - n % 2])
    flusher(study._storage)()  # the controller's group commit: write the journal out
    scaling = root / "scaling"
    scaling.mkdir()
    table = pd.DataFrame({"batch_size": [32, 64], "examples_per_s": [1000.0, 1800.0]})
    table.to_csv(scaling / "scaling.csv", index=False)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2, 2))
    fig.add_subplot().plot([32, 64], [1000, 1800])
    fig.savefig(scaling / "throughput.png")
    return folder


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_report_of_a_multi_objective_campaign_with_failures_and_scaling(tmp_path: Path) -> None:
    folder = _hand_made_campaign(tmp_path / "runs" / "toy-mo")
    files = write_report(folder.root)
    page = files.index.read_text()
    for section in SECTION_IDS:  # no lr, 5 complete trials, no PBT, no architecture, two objectives (no best value),
        left_out = ("lr", "importance", "pbt", "architectures", "cost_value", "elastic", "branching")  # no such table
        assert (f'<section id="{section}">' in page) == (section not in left_out), section
    assert "reported no &#x27;lr&#x27; metric" in page and "importances skipped: only 5 complete" in page
    assert "digits" not in page  # toy_trainers:fit is not the built-in trainer: no dataset to name
    assert HOSTILE not in page and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "<b>bold</b>" not in page and "&lt;b&gt;bold&lt;/b&gt;" in page
    pareto = page.split('<section id="pareto">')[1].split("</section>")[0]
    assert 'alt="Pareto front"' in pareto
    scaling = page.split('<section id="scaling">')[1].split("</section>")[0]
    assert "examples_<wbr>per_<wbr>s" in scaling and 'alt="scaling figure throughput.png"' in scaling
    failures = page.split('<section id="failures">')[1].split("</section>")[0]
    assert "Traceback" in failures and "ValueError" in failures
    assert "&gt; pool &gt; dense-64" in page  # the genomes of the Pareto trials
    environment = page.split('<section id="environment">')[1].split("</section>")[0]
    assert "2 worker(s), 2 thread(s), resources CPU=2" in environment
    # The digest over the trainer's files (and how many) is in the table, not only in the embedded JSON.
    trainer = json.loads(folder.environment.read_text())["trainer"]
    assert trainer["files"] and len(trainer["files_sha256"]) == 64
    assert f"<td>trainer files sha256</td><td>{trainer['files_sha256']}</td>" in environment
    assert f"<td>trainer files</td><td>{len(trainer['files'])} file(s) under {trainer['root']}</td>" in environment
    assert f"| trainer files sha256 | {trainer['files_sha256']} |" in files.markdown.read_text()
    timeline = page.split('<section id="timeline">')[1].split("</section>")[0]
    assert "utilization" in timeline
    frame = pd.read_parquet(files.parquet)
    assert len(frame) == 6 and (frame["state"] == "FAIL").sum() == 1
    assert HOSTILE in files.markdown.read_text()  # Markdown is plain text; only the HTML is escaped


def test_importances_rest_on_the_campaigns_own_trials_not_its_warm_start_copies(tmp_path: Path) -> None:
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    from search.reports.data import CampaignData, importances
    from search.session.warm_start import WARM_START, own_trials

    spec = load_spec(write_spec(tmp_path / "toy-mo.toml", TOY_MO))
    study = optuna.create_study(directions=["maximize", "minimize"])
    space = {"quality": FloatDistribution(0.0, 1.0), "tag": CategoricalDistribution(["<b>bold</b>", "plain"])}
    rng = np.random.default_rng(0)
    for n in range(24):  # 12 own trials: quality decides; 12 copies from the source: only the tag does
        quality, tag, copy = float(rng.uniform()), ("<b>bold</b>", "plain")[n % 2], n >= 12
        value = 10.0 * (tag == "plain") if copy else quality
        attrs = {WARM_START: "runs/old"} if copy else {}
        study.add_trial(
            optuna.trial.create_trial(
                params={"quality": quality, "tag": tag}, distributions=space, values=[value, value], user_attrs=attrs
            )
        )
    data = CampaignData(
        CampaignFolder(tmp_path / "runs" / "toy-mo"), spec, study, tuple(own_trials(study.get_trials())), None, None
    )
    values, problem = importances(data)
    assert problem == "" and set(values) == {"score", "steps"}
    for metric in values:
        assert values[metric]["quality"] > 0.9 > 0.1 > values[metric]["tag"], metric


def test_cluster_shape_and_resumed_environment(tmp_path: Path) -> None:
    shape = cluster_shape(
        {
            "address": "tcp://s:1",
            "workers": {
                "tcp://a:1": {"host": "a", "nthreads": 2, "resources": {"GPU": 2}},
                "tcp://b:1": {"host": "b", "nthreads": 2, "resources": {"GPU": 1}},
            },
        }
    )
    assert (shape["workers"], shape["threads"], shape["resources"], shape["hosts"]) == (2, 4, {"GPU": 3.0}, ["a", "b"])
    path = tmp_path / "environment.json"
    record_environment(path, {"first": 1})
    record_environment(path, {"second": 2})
    assert json.loads(path.read_text()) == {"first": 1, "resumes": [{"second": 2}]}
    assert capture_environment()["cluster"] is None


def test_report_of_a_folder_without_a_campaign_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["report", str(tmp_path)]) == 2
    assert "holds no campaign" in capsys.readouterr().err


# --- the record schema (search.store.records) ----------------------------------------------------


def test_a_trial_record_reads_back_what_the_controller_wrote() -> None:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    trial = study.ask()
    trial.suggest_float("lr", 1e-3, 1e-1, log=True)
    history = encode_history([(1, {"loss": 0.5, "lr": 0.1}, 11.0), (2, {"loss": float("nan"), "lr": 0.05}, 12.0)])
    assert history == [[1, {"loss": 0.5, "lr": 0.1}], [2, {"loss": "nan", "lr": 0.05}]]  # JSON-safe as stored
    write_attrs(
        trial,
        seed=7,
        config={"params": {"lr": 0.1, "genome": "a>b"}, "seed": 7},
        width=2,
        worker="w1",
        devices=[0, 1],
        started=10.0,
        finished=12.5,
        duration=2.5,
        history=history,
        metrics={"loss": "nan", "n_params": 10.0},
        stop_reason="pruned at step 2",
        retries=1,
        pbt_schedule=[[0, 0.1], [100, 0.05]],
    )
    study.tell(trial, state=TrialState.PRUNED)
    record = TrialRecord.of(study.trials[0])
    assert (record.number, record.state, record.seed, record.width, record.worker) == (0, TrialState.PRUNED, 7, 2, "w1")
    assert (record.devices, record.started, record.finished, record.duration) == ((0, 1), 10.0, 12.5, 2.5)
    assert record.history[0] == (1, {"loss": 0.5, "lr": 0.1}) and math.isnan(record.history[1][1]["loss"])
    assert len(record.recorded_history) == 2 and math.isnan(record.metrics["loss"])
    assert record.trainer_params == {"lr": 0.1, "genome": "a>b"} and record.params.keys() == {"lr"}
    assert (record.reason, record.fail_reason, record.retries) == ("pruned at step 2", "", 1)
    assert record.pbt_schedule == ((0, 0.1), (100, 0.05)) and record.state_name == "PRUNED"
    assert TrialRecord.of(record) is record


def test_a_bare_trial_reads_as_defaults_and_unknown_names_are_refused() -> None:
    study = optuna.create_study()
    trial = study.ask()
    with pytest.raises(TypeError, match="unknown trial attribute.*sed"):
        write_attrs(trial, seed=1, sed=2)
    assert "seed" not in study.trials[0].user_attrs  # nothing written when one name is wrong
    write_attrs(trial, interrupted=True, history=[[1, {"x": 1}], "garbage", [2]])
    record = TrialRecord.of(study.trials[0])
    assert record.state_name == "INTERRUPTED" and record.history == ((1, {"x": 1.0}),)
    assert (record.seed, record.config, record.metrics, record.worker, record.started, record.genome) == (None,) * 6
    assert (record.fail_reason, record.traceback, record.retries, record.devices, record.timed) == (
        "",
        "",
        0,
        (),
        False,
    )
    assert {Attr.SEED, Attr.HISTORY, Attr.PBT_LINEAGE, Attr.FAIL_REASON} <= TRIAL_ATTRS


def test_the_folder_paths_use_the_record_file_names(tmp_path: Path) -> None:
    folder = CampaignFolder(tmp_path)
    assert folder.trial_metrics(3) == tmp_path / Files.TRIALS / "3" / Files.TRIAL_METRICS
    assert folder.trial_error_log(3).name == Files.TRIAL_ERROR_LOG == "error.log"
    assert (folder.spec.name, folder.environment.name) == ("spec.toml", "environment.json")
    assert folder.scaling_table == tmp_path / "scaling" / "scaling.csv"
    assert CONTROLLER_FILES == {"metrics.jsonl", "error.log", "params.json"}
    folder.trial(3).mkdir(parents=True)
    append_metrics_line(folder.trial_metrics(3), 1, {"loss": float("inf")}, at=5.0, worker="w")
    assert json.loads(folder.trial_metrics(3).read_text()) == {"step": 1, "time": 5.0, "worker": "w", "loss": "inf"}
