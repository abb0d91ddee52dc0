"""Issue 48: failures that never trap the user.

A campaign whose first trials all fail one way stops (exit 4, one line: the reason and the fix) with the rest of its
budget untouched; ``resume --retry-failed`` and ``run --overwrite`` recover; the end-of-run summary and ``status``
group failures by reason; a trainer may return a number, as an Optuna objective does; ``search.run`` raises where
the command line exits 4; a report value that is not a number is named; a corrupt ``environment.json`` is called
corrupt, and ``status`` names a journal's unreadable line. Real campaigns on the embedded cluster.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from toy_specs import toy_spec, toy_toml

from search.loop.fail_fast import FailFast
from search.store.failures import AllTrialsFailedError, EarlyFailuresError
from spaces.errors import EXIT_ALL_FAILED, InputError
from tests.spec_files import write_spec

BROKEN = "ValueError: data folder /nonexistent/data not found"


def hypersweep(args: list[str], env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "search", *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout
    )


def one_line(stderr: str) -> str:
    """The one error line (other processes on this machine may make Dask warn about a busy dashboard port)."""
    lines = [line for line in stderr.splitlines() if line.startswith("hypersweep:")]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr, stderr
    return lines[0]


def trials_of(folder: Path) -> list[optuna.trial.FrozenTrial]:
    import search

    return search.load(folder).study.get_trials()


def states(trials: list[optuna.trial.FrozenTrial]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for trial in trials:
        counts[trial.state.name] = counts.get(trial.state.name, 0) + 1
    return counts


# --- point 1: stop early, then recover --------------------------------------------------------------------------


def test_fail_fast_trips_at_its_threshold_for_one_reason_and_never_once_a_trial_succeeded() -> None:
    fail = TrialState.FAIL
    watch = FailFast(3)
    watch.told(0, fail, "ValueError", "ValueError: a")
    watch.told(1, fail, "", "metric 'x' is nan")  # another reason: counted apart
    watch.told(2, fail, "ValueError", "ValueError: b")
    assert watch.tripped is None
    watch.told(3, fail, "ValueError", "ValueError: c")
    assert watch.tripped is not None
    assert (watch.tripped.numbers, watch.tripped.first_line) == ((0, 2, 3), "ValueError: a")

    worked = FailFast(3)
    worked.told(0, TrialState.COMPLETE)
    for number in range(1, 5):
        worked.told(number, fail, "ValueError", "ValueError: a")
    assert worked.tripped is None  # the trainer works: later failures are the trials' own

    never = FailFast(0)
    for number in range(5):
        never.told(number, fail, "ValueError", "ValueError: a")
    assert never.tripped is None


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_trainer_failing_one_way_stops_early_and_resume_retry_failed_reruns_the_failed(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    fixed = tmp_path / "fixed"
    body = toy_toml(
        "broken",
        n_trials=10,
        trainer={"entry": "failing_trainers:broken", "options": {"fixed": str(fixed), "sleep": 0.3}},
        cluster={"n_workers": 2},
    )
    spec = write_spec(tmp_path / "broken.toml", body)
    runs, folder = tmp_path / "runs", tmp_path / "runs" / "broken"
    proc = hypersweep(["run", spec, "--runs-dir", runs, "--no-progress"], subprocess_env)
    assert proc.returncode == EXIT_ALL_FAILED, proc.stderr
    line = one_line(proc.stderr)
    assert line.startswith("hypersweep: stopped early: 3 trials failed the same way before any completed"), line
    assert BROKEN in line and f"then 'hypersweep resume {folder} --retry-failed'" in line, line
    assert proc.stdout == "", proc.stdout  # that one line is all it prints
    counts = states(trials_of(folder))
    assert counts.get("FAIL") == 3 and "COMPLETE" not in counts, counts
    assert sum(counts.values()) < 10, counts  # the rest of the budget is not spent (in flight: kept RUNNING)

    status = hypersweep(["status", folder], subprocess_env, timeout=120)
    assert "failures (3), by reason:" in status.stdout and f"3x {BROKEN} (trial " in status.stdout, status.stdout

    fixed.touch()  # the cause is fixed
    proc = hypersweep(["resume", folder, "--retry-failed", "--no-progress"], subprocess_env)
    assert proc.returncode == 0, proc.stderr
    assert "re-running 3 failed trial(s) with their parameters first" in proc.stdout, proc.stdout
    assert "failures (" not in proc.stdout, proc.stdout
    trials = trials_of(folder)
    assert states(trials) == {"COMPLETE": 10, "FAIL": 3}
    failed = {t.number: t.params for t in trials if t.state == TrialState.FAIL}
    retries = {t.user_attrs["retry_of"]: t.params for t in trials if "retry_of" in t.user_attrs}
    assert retries == failed  # each failed trial ran again with its own parameters
    status = hypersweep(["status", folder], subprocess_env, timeout=120)
    assert "10 of 10 trials" in status.stdout and "(3 failed trials re-run, not counted)" in status.stdout, (
        status.stdout
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_metric_the_trainer_never_reports_stops_early_and_the_fixed_spec_recovers(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    def spec_for(metric: str, path: Path) -> Path:
        body = toy_toml(
            "metric",
            n_trials=8,
            metric=metric,
            trainer={"entry": "failing_trainers:undeclared", "options": {"sleep": 0.15}},
            cluster={"n_workers": 2},
        )
        return write_spec(path, body)

    wrong, right = spec_for("accuracy", tmp_path / "wrong.toml"), spec_for("score", tmp_path / "right.toml")
    runs, folder = tmp_path / "runs", tmp_path / "runs" / "metric"
    check = hypersweep(["check", wrong], subprocess_env, timeout=120)
    assert check.returncode == 0, check.stderr
    assert "declares no reported_metrics, so 'accuracy' is checked only when trials finish" in check.stdout

    proc = hypersweep(["run", wrong, "--runs-dir", runs, "--no-progress"], subprocess_env)
    assert proc.returncode == EXIT_ALL_FAILED, proc.stderr
    line = one_line(proc.stderr)
    assert "trainer did not return metric 'accuracy' (it returned ['score'])" in line, line
    assert f"then 'hypersweep run {wrong} --overwrite'" in line, line
    counts = states(trials_of(folder))
    # The stop comes at the third failure; a trial in flight whose failure arrives with it is told too (nothing is
    # dropped): 3 or more FAIL, and the budget is not spent.
    assert counts.get("FAIL", 0) >= 3 and "COMPLETE" not in counts and sum(counts.values()) < 8, counts

    proc = hypersweep(["run", right, "--runs-dir", runs, "--no-progress"], subprocess_env)
    assert proc.returncode == 2 and "start anew with --overwrite" in one_line(proc.stderr)

    # resumed under the fixed spec, the failed trials re-run: nothing printed names the old metric
    resumed = tmp_path / "resumed"
    shutil.copytree(folder, resumed)
    proc = hypersweep(
        ["resume", resumed, "--spec", right, "--allow-changes", "--retry-failed", "--no-progress"], subprocess_env
    )
    assert proc.returncode == 0, proc.stderr
    assert "accuracy" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert states(trials_of(resumed)) == {"COMPLETE": 8, "FAIL": counts["FAIL"]}  # the failed ones re-run, kept
    assert optuna.load_study(
        study_name="metric",
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(resumed / "study.journal"))
        ),
    ).metric_names == ["score"]

    proc = hypersweep(["run", right, "--runs-dir", runs, "--no-progress", "--overwrite"], subprocess_env)
    assert proc.returncode == 0, proc.stderr
    assert states(trials_of(folder)) == {"COMPLETE": 8}  # anew: the failed campaign is gone


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_search_run_raises_what_the_command_line_exits_4_for_with_the_reasons_grouped(tmp_path: Path) -> None:
    import search

    spec = toy_spec(
        "early",
        n_trials=6,
        trainer={"entry": "failing_trainers:broken", "options": {"fixed": str(tmp_path / "no"), "sleep": 0.2}},
    )
    with pytest.raises(EarlyFailuresError) as raised:
        search.run(spec, runs_dir=tmp_path, progress=False)
    assert isinstance(raised.value, search.TrialsFailedError) and raised.value.exit_code == EXIT_ALL_FAILED
    assert [(g.count, g.first_line) for g in raised.value.groups] == [(3, BROKEN)]
    assert f"search.resume('{tmp_path / 'early'}', retry_failed=True)" in str(raised.value), raised.value

    spec = toy_spec("doomed", n_trials=2, trainer=spec["trainer"])
    with pytest.raises(AllTrialsFailedError) as all_failed:
        search.run(spec, runs_dir=tmp_path, progress=False)
    assert [(g.count, g.numbers) for g in all_failed.value.groups] == [(2, (0, 1))]
    assert str(all_failed.value).startswith(f"all 2 trials failed: 2x {BROKEN}"), all_failed.value


# --- points 2, 3, 8: one campaign of a trainer that returns numbers, reports text and raises --------------------


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8 trials of ``failing_trainers:mixed``: 0, 3, 4, 7 return a number; 1, 5 report text; 2, 6 raise."""
    import search

    runs = tmp_path_factory.mktemp("mixed")
    spec = toy_spec("mixed", n_trials=8, fail_fast=0, trainer={"entry": "failing_trainers:mixed"})
    search.run(spec, runs_dir=runs, progress=False)
    return runs / "mixed"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_number_returned_as_an_optuna_objective_returns_it_is_the_study_metric(mixed: Path) -> None:
    trials = {t.number: t for t in trials_of(mixed)}
    complete = sorted(n for n, t in trials.items() if t.state == TrialState.COMPLETE)
    assert complete == [0, 3, 4, 7]
    for number in complete:
        assert trials[number].value == pytest.approx(trials[number].params["quality"])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_tuple_returned_is_the_objectives_of_a_multi_objective_study(tmp_path: Path) -> None:
    import search

    spec = toy_spec(
        "pair",
        n_trials=2,
        direction=None,
        directions=["maximize", "maximize"],
        metric=None,
        metrics=["score", "rest"],
        trainer={"entry": "failing_trainers:objective", "options": {"pair": True}},
    )
    result = search.run(spec, runs_dir=tmp_path, progress=False)
    for trial in result.study.trials:
        quality = trial.params["quality"]
        assert trial.values == pytest.approx([quality, 1.0 - quality])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_report_value_that_is_not_a_number_is_named_by_its_key_and_value(mixed: Path) -> None:
    trials = {t.number: t for t in trials_of(mixed)}
    for number in (1, 5):
        reason = trials[number].user_attrs["fail_reason"]
        assert reason.startswith("TypeError: report at step 1: 'score' = 'abc' (str) is not a number"), reason


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_summary_and_status_group_failures_by_reason(mixed: Path) -> None:
    import search
    from search.reports.status import status_text

    summary = search.load(mixed).summary()
    status = status_text(mixed)
    for text, indent in ((summary, ""), (status, "  ")):
        assert f"{indent}failures (4), by reason:" in text, text
        assert f"{indent}  2x TypeError: report at step 1: 'score' = 'abc'" in text, text
        assert f"{indent}  2x ValueError: trial 2 fails on purpose (trial 2: " in text, text
        assert "trials/1/)" in text and "trials/2/)" in text, text


# --- point 9: say what is corrupt, and where --------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_report_and_reproduce_call_a_corrupt_environment_record_corrupt(mixed: Path, tmp_path: Path) -> None:
    from search.reports.report import write_report
    from search.reports.reproduce import comparison_text, reproduce_trial

    folder = tmp_path / "mixed"
    shutil.copytree(mixed, folder)
    (folder / "environment.json").write_text('{"python": {"version": "3.11"')  # cut short
    markdown = Path(write_report(folder).markdown).read_text()
    assert "environment.json is corrupt (not valid JSON" in markdown and "is missing" not in markdown
    text = comparison_text(reproduce_trial(folder, 0, 1e-6))
    assert "environment.json is corrupt (not valid JSON" in text, text


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_status_names_the_journal_line_it_cannot_read(mixed: Path, tmp_path: Path) -> None:
    from search.reports.status import status_text

    def torn(name: str, index: int) -> tuple[Path, int]:
        folder = tmp_path / name
        shutil.copytree(mixed, folder)
        journal = folder / "study.journal"
        lines = journal.read_bytes().splitlines(keepends=True)
        lines[index] = b'{"op_code": 5, "worker_id": \n'
        journal.write_bytes(b"".join(lines))
        return folder, len(lines) if index == -1 else index + 1

    middle, number = torn("middle", 3)
    with pytest.raises(InputError) as raised:
        status_text(middle)
    assert f"study.journal, line {number}: not JSON" in str(raised.value), raised.value

    last, number = torn("last", -1)
    assert f"warning: {last / 'study.journal'}, line {number}: not JSON" in status_text(last)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_number_or_tuple_returned_by_a_trial_in_its_own_process_is_the_study_metric(tmp_path: Path) -> None:
    """Fake GPUs (a worker declaring ``GPU=1`` on a machine without CUDA): each trial leases it and so runs in a
    process of its own (``trainers.ddp.launch_solo``), whose number or tuple returned travels back to the study."""
    import search
    from tests.search.dask_processes import external_cluster

    with external_cluster(tmp_path / "cluster", n_workers=1, resources="GPU=1") as cluster:
        for name, pair, extra in (("solo", False, {}), ("solo-pair", True, {"directions": ["maximize"] * 2})):
            study = {"direction": None, "metric": None, "metrics": ["score", "rest"], **extra} if pair else {}
            spec = toy_spec(
                name,
                n_trials=2,
                trainer={"entry": "failing_trainers:objective", "gpus": 1, "options": {"pair": pair}},
                **study,
            )
            result = search.run(spec, runs_dir=tmp_path / "runs", scheduler=cluster.address, progress=False)
            for trial in result.study.trials:
                assert trial.state == TrialState.COMPLETE, trial.user_attrs.get("fail_reason")
                quality = trial.params["quality"]
                assert trial.values == pytest.approx([quality, 1.0 - quality] if pair else [quality])
