"""bench.evolution's summary: rank tests both ways, A12, runs at the optimum, Holm, seed sets."""

from __future__ import annotations

import pytest

from bench.evolution import Run, compare, holm, seed_sets, summarise, verdicts


def _runs(method: str, values: list[float], tests: list[float] | None = None) -> list[Run]:
    tests = tests or values
    return [
        Run("cifar100", 1, method, seed, 200, best_val=v, regret=round(61.32 - v, 4), test=t)
        for seed, (v, t) in enumerate(zip(values, tests, strict=True))
    ]


def test_compare_tests_both_directions_and_gives_a12() -> None:
    low, high = [1.0, 2.0, 3.0, 4.0, 5.0], [6.0, 7.0, 8.0, 9.0, 10.0]
    worse = compare(low, high, "val_vs_tpe")
    assert worse["p_worse_val_vs_tpe"] < 0.01 < worse["p_val_vs_tpe"]
    assert worse["a12_val_vs_tpe"] == 0.0
    assert compare(high, low, "x")["a12_x"] == 1.0
    assert compare([1.0, 1.0], [1.0, 1.0], "x")["a12_x"] == 0.5  # ties count half


def test_holm_steps_down_and_stops_at_the_first_kept_hypothesis() -> None:
    assert holm([0.01, 0.04, 0.03, 0.005]) == [True, False, False, True]
    assert holm([0.01, 0.011]) == [True, True]  # 0.01 <= 0.025, then 0.011 <= 0.05
    assert holm([0.03, 0.03]) == [False, False]


def test_summary_counts_runs_at_the_optimum_and_a_cell_where_the_first_method_is_worse() -> None:
    # A validation tie: both reach 61.32, the first method always on the cell with the lower test accuracy.
    evo = _runs("evolution", [61.32] * 8, [60.64] * 8)
    tpe = _runs("tpe", [61.32] * 4 + [61.26] * 4, [61.04] * 4 + [61.18] * 4)
    (row,) = summarise(evo + tpe, ["evolution", "tpe"])
    assert row["evolution_at_optimum"] == 1.0 and row["tpe_at_optimum"] == 0.5
    assert row["p_val_vs_tpe"] < 0.05 and row["p_worse_test_vs_tpe"] < 0.001
    text = verdicts([row], "evolution", "tpe")
    assert "val: better in 1, worse in 0 of 1 cells" in text
    assert "test: better in 0, worse in 1 of 1 cells" in text


def test_seed_sets_pool_disjoint_sets_and_refuse_overlapping_ones() -> None:
    assert seed_sets([2000, 3000], 3) == [2000, 2001, 2002, 3000, 3001, 3002]
    assert seed_sets([0, 2], 3) is None


@pytest.mark.parametrize("argv", [["--seed0", "0", "10", "--seeds", "20"], ["--seed0", "-1"]])
def test_main_refuses_bad_seed_sets(argv: list[str]) -> None:
    from bench.evolution import main

    with pytest.raises(SystemExit):
        main(argv)
