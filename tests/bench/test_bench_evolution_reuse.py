"""bench.evolution --reuse: a peer's runs are read from an earlier runs file, complete or refused."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bench import evolution as bench_evolution
from bench.evolution import Run, load_runs, reused


def _write(path: Path, runs: list[Run]) -> None:
    bench_evolution._write(path, [dataclasses.asdict(r) for r in runs])


def _run(seed: int, budget: int, method: str = "tpe") -> Run:
    return Run("cifar10", 1, method, seed, budget, best_val=80.0 + seed, regret=4.892 - seed, test=85.5)


def test_runs_round_trip_through_the_runs_file(tmp_path: Path) -> None:
    runs = [_run(s, b) for s in (0, 1) for b in (100, 200)]
    _write(tmp_path / "r.csv", runs)
    assert load_runs([tmp_path / "r.csv"]) == runs


def test_reused_takes_every_cell_or_names_the_missing_one(tmp_path: Path) -> None:
    runs = [_run(0, 100), _run(0, 200), _run(1, 100), _run(0, 100, method="random")]
    cells = [("cifar10", 1, 0, 100), ("cifar10", 1, 1, 100)]
    assert reused(runs, "tpe", cells) == [runs[0], runs[2]]
    with pytest.raises(ValueError, match=r"no tpe run for .*\('cifar10', 1, 1, 200\)"):
        reused(runs, "tpe", [*cells, ("cifar10", 1, 1, 200)])


@pytest.mark.slow
def test_main_reads_a_reused_method_instead_of_running_it(tmp_path: Path) -> None:
    common = ["--seeds", "2", "--workers", "4", "--budgets", "10", "--datasets", "cifar10"]
    first = bench_evolution.main(
        [
            *common,
            "--methods",
            "evolution",
            "random",
            "--out",
            str(tmp_path / "a.csv"),
            "--runs-out",
            str(tmp_path / "ra.csv"),
        ]
    )
    again = bench_evolution.main(
        [
            *common,
            "--methods",
            "evolution",
            "random",
            "--reuse",
            str(tmp_path / "ra.csv"),
            "--out",
            str(tmp_path / "b.csv"),
            "--runs-out",
            str(tmp_path / "rb.csv"),
        ]
    )
    assert first == again  # both methods found: nothing runs, the same summary
    assert load_runs([tmp_path / "rb.csv"]) == load_runs([tmp_path / "ra.csv"])
