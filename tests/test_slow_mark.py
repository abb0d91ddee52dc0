"""The `slow` mark's check (tests/conftest.py) fails an unmarked test past HYPERSWEEP_SLOW_LIMIT, counting its
set-up, and leaves marked tests, fast tests and runs without the variable alone."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.slow  # each case runs pytest again (in process)

CONFTEST = (Path(__file__).parent / "conftest.py").read_text()
TESTS = """
import time
import pytest

@pytest.fixture
def slow_setup():
    time.sleep(0.4)

def test_unmarked_and_slow():
    time.sleep(0.4)

def test_unmarked_with_a_slow_setup(slow_setup):
    pass

@pytest.mark.slow
def test_marked_and_slow():
    time.sleep(0.4)

def test_fast():
    pass
"""


def run(pytester: pytest.Pytester, limit: str | None, monkeypatch: pytest.MonkeyPatch) -> pytest.RunResult:
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n")
    pytester.makepyfile(test_timed=TESTS)
    if limit is None:
        monkeypatch.delenv("HYPERSWEEP_SLOW_LIMIT", raising=False)
    else:
        monkeypatch.setenv("HYPERSWEEP_SLOW_LIMIT", limit)
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:timeout")


def test_an_unmarked_test_over_the_limit_fails_naming_its_time(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run(pytester, "0.2", monkeypatch)
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["*over HYPERSWEEP_SLOW_LIMIT=0.2: mark it slow*"])
    assert "FAILED test_timed.py::test_unmarked_and_slow" in result.stdout.str()
    assert "FAILED test_timed.py::test_unmarked_with_a_slow_setup" in result.stdout.str()


def test_without_the_variable_nothing_is_checked(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    run(pytester, None, monkeypatch).assert_outcomes(passed=4)


def test_a_limit_that_is_not_a_positive_number_is_a_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run(pytester, "soon", monkeypatch)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*HYPERSWEEP_SLOW_LIMIT='soon': must be a number of seconds*"])
