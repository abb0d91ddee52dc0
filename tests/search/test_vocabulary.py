"""The typed vocabulary: enums whose values are the strings stored before, the worker's Outcome carrying the
error's type, and a command line that maps only our own errors to exit codes (a bug shows its traceback)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
import pytest
from optuna.study import StudyDirection

from cluster.errors import ClusterError, InvalidSetting, MissingExtraError, SettingError
from cluster.outcome import Outcome, TrialStatus, error_type_of
from search.cli import _exit_code, failure_summary, main
from search.sampling.samplers import SAMPLING
from search.scaling.sweep import TargetGoal
from search.scaling.target import steps_to_target
from search.store.folder import NoCampaignError
from search.vocab.terms import SamplingMode, StopReason, direction_of, maximizing
from spaces.errors import EXIT_CLUSTER, EXIT_ERROR, EXIT_INPUT, InputError
from tests.search.toy_specs import toy_spec

ROOT = Path(__file__).resolve().parents[2]


def test_enum_values_are_the_strings_stored_before() -> None:
    assert [str(r) for r in StopReason] == [
        "pruned",
        "target reached",
        "time budget",
        "trial timeout",
        "time budget: never started",
        "outpaced",
        "resource budget",
    ]
    assert (
        f"{StopReason.PRUNED}" == "pruned" and json.dumps({"r": StopReason.TARGET_REACHED}) == '{"r": "target reached"}'
    )
    assert SAMPLING == ("auto", "process", "thread", "inline") == tuple(SamplingMode)
    assert [str(s) for s in TrialStatus] == ["ok", "error", "lost", "cancelled"]
    assert Outcome("lost").status is TrialStatus.LOST  # a string is read as its member
    with pytest.raises(ValueError, match="status='done': must be one of ok, error, lost, cancelled"):
        Outcome("done")  # type: ignore[arg-type]


def test_directions_are_optunas_study_direction() -> None:
    assert direction_of("maximize") is direction_of("max") is StudyDirection.MAXIMIZE
    assert direction_of("minimize") is direction_of(StudyDirection.MINIMIZE) is StudyDirection.MINIMIZE
    assert maximizing("maximize") and not maximizing("min")
    with pytest.raises(ValueError, match="direction 'up'"):
        direction_of("up")
    goal = TargetGoal("acc", 0.9, "max")  # the words a scaling goal took are still read
    assert goal.mode is StudyDirection.MAXIMIZE and goal.comparison == ">="
    assert TargetGoal("loss", 0.1, StudyDirection.MINIMIZE).reached({"loss": 0.05})
    history = [(1, {"acc": 0.5, "steps": 10.0, "examples": 80.0}), (2, {"acc": 0.95, "steps": 20.0, "examples": 160.0})]
    by_word = steps_to_target(history, "acc", 0.9, "max", interpolate=False)
    assert by_word == steps_to_target(history, "acc", 0.9, StudyDirection.MAXIMIZE, interpolate=False)
    assert by_word is not None and by_word.steps == 20.0


class BadBatch(Exception):
    """Not named ``...Error``: no text pattern could recover it from a message."""


def test_error_type_names_the_class() -> None:
    assert error_type_of(ValueError("x")) == "ValueError"
    assert error_type_of(BadBatch("x")) == f"{__name__}.BadBatch"


def test_only_our_errors_have_exit_codes() -> None:
    assert _exit_code(ValueError("--workers=0")) is None  # a plain ValueError is a bug: its traceback shows
    assert _exit_code(FileNotFoundError("x")) == EXIT_ERROR  # an OSError: the machine's, one line
    assert _exit_code(InputError("--n-trials=0: must be >= 1")) == EXIT_INPUT
    assert _exit_code(NoCampaignError("f holds no campaign")) == EXIT_INPUT
    assert isinstance(NoCampaignError("f"), FileNotFoundError)  # callers catching FileNotFoundError still do
    assert _exit_code(SettingError("--gpus=-1: must be >= 0")) == EXIT_INPUT
    assert _exit_code(InvalidSetting("cores", "cores=0")) == EXIT_INPUT
    assert _exit_code(MissingExtraError("pip install")) == EXIT_INPUT
    assert _exit_code(ClusterError("no scheduler")) == EXIT_CLUSTER


def test_a_cluster_setting_from_the_command_line_is_still_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", "tcp://127.0.0.1:8786", "--gpus", "-1", "--print"]) == EXIT_INPUT
    assert capsys.readouterr().err == "hypersweep: --gpus=-1: must be >= 0\n"


def test_a_bug_shows_its_traceback_not_a_bad_input_line(tmp_path: Path) -> None:
    """A plain ValueError raised by our own code (here, planted in the status command) is a bug: the command
    line shows its traceback and exits 1, as Python does; it is not passed off as the user's bad input."""
    script = textwrap.dedent("""
        import sys
        import search.reports.status as status

        def broken(folder):
            raise ValueError("an internal invariant broke")

        status.status_text = broken
        from search.cli import main
        sys.exit(main(["status", sys.argv[1]]))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback (most recent call last)" in proc.stderr, proc.stderr
    assert "ValueError: an internal invariant broke" in proc.stderr
    assert "hypersweep: an internal invariant broke" not in proc.stderr


def test_a_user_error_from_a_command_is_still_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["reproduce", str(tmp_path), "0"]) == EXIT_INPUT
    assert capsys.readouterr().err == f"hypersweep: {tmp_path} holds no campaign (no spec.toml)\n"
    assert main(["reproduce", str(tmp_path), "0", "--tolerance", "-1"]) == EXIT_INPUT
    assert capsys.readouterr().err == "hypersweep: --tolerance=-1.0: must be a finite number >= 0\n"


def make_bad_batch_fit():
    """A trainer (a closure: it goes to the worker by value) raising an error whose name ends in no 'Error'."""

    class BadBatch(Exception):
        pass

    def fit(config, reporter):  # noqa: ANN001, ANN202 - a user's plain trainer
        raise BadBatch(f"batch of trial {config.number} is bad")

    return fit, BadBatch


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_worker_outcome_carries_the_error_type_to_the_record(tmp_path: Path) -> None:
    import search
    from search.store.failures import AllTrialsFailedError

    fit, bad_batch = make_bad_batch_fit()
    with pytest.raises(AllTrialsFailedError) as raised:  # every trial failed: what the command line exits 4 for
        search.run(toy_spec("typed", n_trials=2), trainer=fit, runs_dir=tmp_path, progress=False)
    assert [(g.count, g.numbers) for g in raised.value.groups] == [(2, (0, 1))]
    result = search.load(tmp_path / "typed")
    trials = result.study.get_trials()
    assert [t.state for t in trials] == [optuna.trial.TrialState.FAIL] * 2
    # the class's module and name, as the worker saw it (a class shipped by value has no <locals> there)
    module = bad_batch.__module__
    assert {t.user_attrs["error_type"] for t in trials} == {f"{module}.BadBatch"}
    assert {t.user_attrs["fail_reason"] for t in trials} == {
        "BadBatch: batch of trial 0 is bad",
        "BadBatch: batch of trial 1 is bad",
    }  # as before
    # grouped by the recorded type: two messages, one kind (no pattern over the text could tell)
    assert failure_summary(result.study) == "all 2 trials failed: 2x BadBatch: batch of trial 0 is bad"


def test_failures_recorded_without_a_type_are_grouped_by_their_whole_reason_not_a_pattern() -> None:
    """A record with no ``error_type`` (from before workers sent it, or a failure that raised nothing): no text is
    parsed for a class name, so two messages that merely start alike are two kinds."""
    study = optuna.create_study(direction="maximize")
    for reason in ("ValueError: lr 0.1 is bad", "ValueError: lr 0.2 is bad", "metric 'accuracy' is nan") + (
        "metric 'accuracy' is nan",
    ):
        study.add_trial(
            optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, user_attrs={"fail_reason": reason})
        )
    assert failure_summary(study) == (
        "all 4 trials failed: 2x metric 'accuracy' is nan; 1x ValueError: lr 0.1 is bad; 1x ValueError: lr 0.2 is bad"
    )
