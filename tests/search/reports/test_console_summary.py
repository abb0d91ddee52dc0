"""The end-of-run summary on a terminal (issue 48, point 6): the table fits 100 columns and leaves out columns
empty in every row, the scaling conclusion is wrapped, the end says where the report is and what to run next,
and more local workers than cores is said in one line."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import optuna
import pytest
from toy_specs import toy_toml

from search.cli import _warn_insecure_cluster
from search.reports.console import WIDTH
from search.session.runner import RunOptions, load_study, summary_text
from search.spec.campaign_spec import parse_spec
from search.store.folder import CampaignFolder

NAMES = [f"a_rather_long_parameter_name_{i}" for i in range(8)]


def _campaign(tmp_path: Path, **study: object):  # type: ignore[no-untyped-def]
    space = {n: {"type": "float", "low": 1e-5, "high": 1.0, "log": True} for n in NAMES}
    text = toy_toml("wide", 4, 1, space=space, **study)
    spec = parse_spec(tomllib.loads(text), "wide.toml", text, check_trainer=False)  # no trainer runs here
    folder = CampaignFolder(tmp_path / "wide")
    folder.create(text)
    return spec, folder, load_study(spec, folder, create=True)


def test_the_end_of_run_table_fits_100_columns_without_empty_columns_and_says_what_to_run_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the summary names the folder from here, as a user's runs/<name>
    spec, folder, study = _campaign(tmp_path)
    dists = {n: optuna.distributions.FloatDistribution(1e-5, 1.0, log=True) for n in NAMES}
    for i, value in enumerate([0.5, 0.9, 0.7]):
        params = {n: 1.234567e-3 * (i + 1) * (k + 1) for k, n in enumerate(NAMES)}
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=value))
    text = summary_text(spec, folder, study)
    widest = max(text.splitlines(), key=len)
    assert len(widest) <= WIDTH, widest
    for empty in ("gpu_share", "gpu_utilization", "oom_retries", "peak_memory_mib", "params."):
        assert empty not in text, text  # no trial recorded them (CPU, no memory figures); names without prefix
    for name in NAMES:  # every parameter still shown, in a block of its own when it does not fit beside the rest
        assert name in text
    shown = os.path.relpath(folder.root)
    assert f"report: hypersweep report {shown}" in text and f"{shown}/report/index.html" in text
    assert f"hypersweep reproduce {shown} 1 " in text  # the best trial (0.9)


def test_a_scaling_conclusion_prints_wrapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    root = Path(__file__).resolve().parents[3]
    text = (root / "examples" / "digits-scaling.toml").read_text()
    spec = parse_spec(tomllib.loads(text), "digits-scaling.toml", text, check_trainer=False)
    folder = CampaignFolder(tmp_path / "sweep")
    folder.create(text)
    folder.scaling.mkdir(parents=True, exist_ok=True)
    long = " ".join(["the critical batch size B_crit is about 1,310 examples"] * 40)
    folder.scaling_conclusion.write_text(long + "\n")
    summary = summary_text(spec, folder, load_study(spec, folder, create=True))
    lines = summary.split("Batch-size scaling", 1)[1].split("\ntable and plots:", 1)[0].splitlines()[1:]
    assert len(lines) > 1 and all(len(line) <= WIDTH for line in lines), lines
    assert " ".join(lines) == long


def test_more_local_workers_than_cores_is_said_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec, _folder, _study = _campaign(tmp_path)
    cores = os.cpu_count() or 1
    _warn_insecure_cluster(spec, RunOptions(n_workers=cores))
    assert capsys.readouterr().err == ""
    _warn_insecure_cluster(spec, RunOptions(n_workers=cores * 4))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"on {cores} core(s)" in err[0] and f"--workers {cores}" in err[0], err
