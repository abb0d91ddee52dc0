"""bench.nb201_ties: the table's validation ties, the size rule at ties, which tied cell runs hold."""

from __future__ import annotations

import pandas as pd

from bench.nb201_ties import held, size_at_ties, table, tied_optimum


def test_cifar100s_validation_optimum_is_a_two_cell_tie_with_different_test_accuracy() -> None:
    tied = tied_optimum(table(), "cifar100")
    assert sorted(tied["index"]) == [10165, 13714]
    assert sorted(tied["cifar100-test"]) == [60.64, 61.04]
    assert list(tied.sort_values("index")["cost"]) == [29, 37]  # 10165 has a 1x1 where 13714 has a 3x3


def test_size_at_ties_counts_pairs_of_equal_validation_by_cost() -> None:
    frame = pd.DataFrame(
        {
            "cost": [1, 9, 9, 0, 5],
            "x-val": [70.0, 70.0, 70.0, 60.0, 60.0],
            "x-test": [71.0, 69.0, 71.0, 50.0, 50.0],
        }
    )
    # at 70: (1 vs 9) cheaper higher, (1 vs 9) equal, (9 vs 9) skipped; at 60: (0 vs 5) equal
    assert size_at_ties(frame, "x") == (1, 0, 2)
    assert size_at_ties(frame, "x", top=3) == (1, 0, 1)


def test_held_reads_each_run_as_bench_evolution_does() -> None:
    found = held(["random"], workers=2, budget=12, dataset="cifar10", seeds=[0, 1])
    rows = table()
    pairs = set(zip(rows["cifar10-val"], rows["cifar10-test"], strict=True))
    assert found["random"]["runs"] == 2 and sum(found["random"]["held"].values()) == 2
    assert set(found["random"]["held"]) <= pairs
    assert found["random"]["all_tied_evaluated"] == 0  # 12 random cells of 15,625 miss the tied optimum
