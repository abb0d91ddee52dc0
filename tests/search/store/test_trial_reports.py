"""A trial's reports have one source, the study: a ``metrics.jsonl`` lost, emptied or cut after its trial was told
is rebuilt from it (by ``resume`` and ``report``), and ``Result.history`` reads the study, not the file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import optuna
import pandas as pd
import pytest
from private_mount import needs_private_mount, run_scenario
from toy_specs import toy_spec

import search
from search.store.folder import CampaignFolder
from search.store.records import Attr, encode_history, metrics_line
from search.store.trial_reports import reports_of, restore_metrics_files

HERE = Path(__file__).resolve().parents[1]  # tests/search: the shared trainers and scenarios
REPORTS = [(1, {"score": 0.5, "loss": float("nan")}, 100.0), (2, {"score": 0.75, "loss": 1.5}, 101.5)]


def _told_trial(study: optuna.Study, number_of_reports: int, *, times: bool = True) -> optuna.trial.FrozenTrial:
    reports = REPORTS[:number_of_reports]
    attrs: dict[str, object] = {Attr.HISTORY: encode_history(reports), Attr.WORKER: "tcp://127.0.0.1:1"}
    if times:
        attrs[Attr.REPORT_TIMES] = [at for _s, _m, at in reports]
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=0.75, user_attrs=attrs))
    return study.get_trials(deepcopy=False)[-1]


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def test_files_lost_emptied_or_cut_are_rewritten_from_the_study_and_whole_ones_are_left(tmp_path: Path) -> None:
    folder = CampaignFolder(tmp_path)
    study = optuna.create_study()
    trials = [_told_trial(study, 2) for _ in range(4)]
    whole = "".join(metrics_line(s, m, at, "tcp://127.0.0.1:1") for s, m, at in REPORTS)
    for number, text in [(1, ""), (2, whole[: len(whole) // 2 + 3]), (3, whole)]:  # 0: no file, no folder
        folder.trial(number).mkdir(parents=True)
        folder.trial_metrics(number).write_text(text)
    before = folder.trial_metrics(3).stat().st_mtime_ns

    assert restore_metrics_files(trials, folder) == [0, 1, 2]
    for number in range(4):
        assert _lines(folder.trial_metrics(number)) == whole.splitlines(keepends=True)
        got = reports_of(trials[number], folder)
        assert [(s, at) for s, _m, at in got] == [(1, 100.0), (2, 101.5)]
        assert got[1][1] == {"score": 0.75, "loss": 1.5}
    assert folder.trial_metrics(3).stat().st_mtime_ns == before  # a whole file is not written again
    assert restore_metrics_files(trials, folder) == []
    assert not list(tmp_path.rglob(".*tmp*"))  # written to a temporary file, then renamed


def test_a_trial_told_without_report_times_is_read_from_its_file_and_never_rewritten(tmp_path: Path) -> None:
    """Campaigns recorded before ``report_times``: the file where it is whole, the history (no times) where not."""
    folder = CampaignFolder(tmp_path)
    study = optuna.create_study()
    old = _told_trial(study, 2, times=False)
    assert restore_metrics_files([old], folder) == [] and not folder.trial(0).exists()
    assert [(s, m["score"]) for s, m, _at in reports_of(old, folder)] == [(1, 0.5), (2, 0.75)]
    folder.trial(0).mkdir(parents=True)
    folder.trial_metrics(0).write_text("".join(metrics_line(s, m, at) for s, m, at in REPORTS))
    assert [at for _s, _m, at in reports_of(old, folder)] == [100.0, 101.5]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_resume_report_and_result_history_give_every_report_after_metrics_files_were_lost(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    """What a read-only file system fault left (finished trials with an empty or missing ``metrics.jsonl``): the
    history is whole, and ``report`` and ``resume`` (of a finished campaign) put the files back as they were."""
    result = search.run(toy_spec("lost", 3, 4), runs_dir=tmp_path, progress=False)
    folder = CampaignFolder(result.folder)
    files = [folder.trial_metrics(n) for n in range(3)]
    original = [_lines(f) for f in files]
    expected = result.history
    assert len(expected) == 3 * 4 * 4 and all(len(lines) == 4 for lines in original)

    def lose() -> None:
        files[0].unlink()
        files[1].write_text("")
        files[2].write_text("".join(original[2][:2]) + original[2][2][:9])  # cut mid-line

    lose()
    pd.testing.assert_frame_equal(search.load(result.folder).history, expected)
    for command in ("report", "resume"):
        done = subprocess.run(
            [sys.executable, "-m", "search", command, str(result.folder)],
            capture_output=True,
            text=True,
            env=subprocess_env,
            timeout=240,
        )
        assert done.returncode == 0, done.stderr
        assert "trials [0, 1, 2]: metrics.jsonl held fewer reports than the study" in done.stderr
        restored = [[json.loads(line) for line in _lines(f)] for f in files]
        assert restored == [[json.loads(line) for line in lines] for lines in original], command
        pd.testing.assert_frame_equal(search.load(result.folder).history, expected)
        lose()


@pytest.mark.slow
@pytest.mark.timeout(600)
@needs_private_mount
def test_a_read_only_file_system_stops_the_run_in_one_line_and_resume_rebuilds_the_emptied_files(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    """The fault of the issue: the campaign's file system turned read-only mid-run and two told trials were left
    with an empty ``metrics.jsonl`` (``tests/search/read_only_scenario.py``)."""
    result = run_scenario("read_only_scenario.py", tmp_path, subprocess_env)
    code, stderr = result["first"]
    last = stderr.strip().splitlines()[-1]
    assert code == 1 and "Traceback" not in stderr, stderr
    assert last.startswith("hypersweep: ") and "Read-only file system" in last and "hypersweep resume" in last
    emptied = result["emptied"]
    assert len(emptied) >= 2, result
    code, stderr = result["second"]
    assert code == 0, stderr
    assert f"trials {emptied}: metrics.jsonl held fewer reports than the study; rewritten from it" in stderr
    assert result["trials"] == [[n, "COMPLETE"] for n in range(4)]
    assert result["history"] == result["lines"] == [[1, 2, 3, 4]] * 4
