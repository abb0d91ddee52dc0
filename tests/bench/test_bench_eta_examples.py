"""bench.eta_examples reads the report's errors and runs the CLI a user runs (issue 52, point 5a)."""

from __future__ import annotations

from pathlib import Path

from bench.eta_examples import ROOT, Ran, command, medians, row


def _ran(errors: dict[str, float], rep: int = 0) -> Ran:
    return Ran("digits", rep, 20.0, 15.0, errors, (1.0, 1.5), 0)


def test_the_median_at_each_point_is_over_the_runs_that_have_it() -> None:
    rans = [_ran({"25%": 0.1, "50%": 0.3, "75%": 0.9}), _ran({"25%": 0.5, "50%": 0.2}), _ran({"25%": 0.2})]
    assert medians(rans) == {"25%": 0.2, "50%": 0.25, "75%": 0.9}
    assert medians([]) == {"25%": None, "50%": None, "75%": None}


def test_a_run_s_line_shows_a_missing_point_and_a_failed_run() -> None:
    line = row(Ran("digits", 1, 33.0, None, {"25%": 0.034}, (2.0, 3.0), 124))
    assert line.startswith("digits #1: 3% / - / -")
    assert "exit 124" in line and "campaign -" in line


def test_a_scaling_spec_runs_through_the_scaling_command(tmp_path: Path) -> None:
    scaling = command(ROOT / "examples" / "mnist1d-scaling.toml", 2, tmp_path)
    plain = command(ROOT / "examples" / "digits.toml", 2, tmp_path)
    assert scaling[2:4] == ["search", "scaling"] and plain[2:4] == ["search", "run"]
    assert plain[-5:] == ["--workers", "2", "--no-progress", "--runs-dir", str(tmp_path)]
