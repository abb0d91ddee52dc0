"""The branching study: the critical-batch rule, the schedule, the spec's checks, and a tiny real study.

The real study runs the built-in digits trainer on a local Dask cluster of worker processes.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from search.scaling import branch_run
from search.scaling.branch_run import dask_submit, run_branching, write_branching
from search.scaling.branching import (
    Branch,
    BranchingSpec,
    at_grid_edge,
    batch_schedule,
    best_per_batch,
    critical_batch,
    widening,
)
from trainers.api import TrialConfig


def spec(**kw: object) -> BranchingSpec:
    settings: dict[str, object] = {"points": (1, 3), "batch_sizes": (8, 32), "reference_batch": 8, "epochs": 4}
    return BranchingSpec(**{**settings, **kw})  # type: ignore[arg-type]


# --- the rules -------------------------------------------------------------------------------


def test_critical_batch_is_the_largest_within_epsilon_of_the_best() -> None:
    losses = {8: 0.50, 16: 0.505, 32: 0.52, 64: 0.70}
    assert critical_batch(losses, 0.02) == 16  # 0.505 <= 0.51 < 0.52
    assert critical_batch(losses, 0.05) == 32
    assert critical_batch(losses, 0.0) == 8


def test_critical_batch_may_exceed_the_best_batch_and_skips_diverged_branches() -> None:
    assert critical_batch({8: 0.51, 16: 0.50, 32: 0.504, 64: math.nan}, 0.01) == 32
    with pytest.raises(ValueError, match="no batch size has a finite loss"):
        critical_batch({8: math.inf}, 0.01)


def test_best_per_batch_takes_each_batch_its_lowest_loss_at_that_point() -> None:
    branches = [
        Branch(1, 8, 1.0, 0.1, 0.4, 0.9),
        Branch(1, 8, 2.0, 0.2, 0.3, 0.9),
        Branch(1, 32, 1.0, 0.4, math.nan, 0.1),
        Branch(3, 8, 1.0, 0.1, 0.1, 0.9),
    ]
    best = best_per_batch(branches, 1)
    assert set(best) == {8} and best[8].lr == 0.2


def test_a_tuned_rate_at_an_end_of_its_grid_is_named_and_widened_one_step() -> None:
    branches = [
        Branch(1, 8, 0.5, 0.01, 0.30, 0.9),  # B=8: best at the low end
        Branch(1, 8, 1.0, 0.02, 0.35, 0.9),
        Branch(1, 16, 0.5, 0.01, 0.40, 0.9),  # B=16: bracketed
        Branch(1, 16, 1.0, 0.02, 0.30, 0.9),
        Branch(1, 16, 2.0, 0.04, 0.50, 0.9),
        Branch(1, 32, 1.0, 0.04, 0.45, 0.9),  # B=32: best at the high end
        Branch(1, 32, 2.0, 0.08, 0.40, 0.9),
        Branch(1, 64, 1.0, 0.08, 0.40, 0.9),  # B=64: one rate, nothing to bracket
        Branch(3, 8, 1.0, 0.02, 0.20, 0.9),
    ]
    assert at_grid_edge(branches, 1) == [8, 32]
    assert widening(branches, [1, 3]) == [(1, 8, 0.25), (1, 32, 4.0)]
    widened = [*branches, Branch(1, 8, 0.25, 0.005, 0.32, 0.9), Branch(1, 32, 4.0, 0.16, 0.9, 0.5)]
    assert at_grid_edge(widened, 1) == [] and widening(widened, [1]) == []


def test_the_schedule_starts_at_the_reference_batch_and_never_shrinks() -> None:
    assert batch_schedule([1, 3, 6], [8, 32, 16], 8) == [(0, 8), (3, 32)]
    assert batch_schedule([1, 3], [16, 64], 8) == [(0, 8), (1, 16), (3, 64)]
    with pytest.raises(ValueError, match="2 points but 1"):
        batch_schedule([1, 3], [8], 8)


def test_the_branch_rate_follows_the_rule_times_the_factor() -> None:
    s = spec(lr_rule="sqrt")
    assert s.branch_lr(0.02, 32, 0.5) == pytest.approx(0.5 * 0.02 * 2.0)
    assert spec(lr_rule="linear").branch_lr(0.02, 32, 1.0) == pytest.approx(0.08)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"points": ()}, "points=()"),
        ({"points": (3, 1)}, "strictly increasing"),
        ({"epochs": 3}, "epochs=3: must be an int > the last point 3"),
        ({"batch_sizes": (8, 8)}, "distinct"),
        ({"reference_batch": 32}, "reference_batch=32: must be the smallest"),
        ({"branch_epochs": 0}, "branch_epochs=0"),
        ({"lr_factors": (1.0, -1.0)}, "lr_factors"),
        ({"lr_rule": "cube"}, "cube"),
        ({"epsilon": 1.5}, "epsilon=1.5"),
        ({"widen": -1}, "widen=-1: must be an int >= 0"),
    ],
)
def test_the_spec_names_the_value_and_the_rule(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        spec(**kw)


def test_the_checkpoint_name_is_the_trainers() -> None:
    from trainers.loop import CHECKPOINT_NAME

    assert branch_run.CHECKPOINT_NAME == CHECKPOINT_NAME


# --- a real study ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client() -> Iterator[object]:
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as c,
    ):
        yield c


def reference(epochs: int) -> TrialConfig:
    params = {"model": "mlp", "hidden": 32, "optimizer": "sgd", "momentum": 0.9, "schedule": "constant"}
    return TrialConfig(
        study="branching",
        number=0,
        params={**params, "batch_size": 8, "lr": 0.02},
        seed=3,
        epochs=epochs,
        dataset="digits",
        device="cpu",
        options={"noise_scale_every": 1},
    )


@pytest.mark.slow
def test_a_tiny_study_branches_from_the_reference_checkpoint(client: object, tmp_path: Path) -> None:
    s = BranchingSpec(points=(1,), batch_sizes=(8, 64), reference_batch=8, epochs=2, lr_factors=(1.0, 2.0), widen=1)
    submit = dask_submit(client, "trainers.classifier:fit")
    seen: list[list[branch_run.Reports]] = []

    def recording(configs: object) -> list[branch_run.Reports]:
        out = submit(configs)  # type: ignore[arg-type]
        seen.append(out)
        return out

    result = run_branching(s, reference(2), tmp_path, recording, target=("val_accuracy", 0.5, "max"))
    write_branching(result, s, tmp_path)
    ref_epoch1 = seen[0][0][0][1]
    branch_reports = seen[2] + seen[3]
    assert len(seen[2]) == 4 and len(seen[3]) == 2  # 2 batch sizes x 2 rates, then one step out for each
    for b in (8, 64):  # two rates always leave the best at an end: the round adds half the lower or twice the higher
        first = {x.factor: x.val_loss for x in result.branches[:4] if x.batch_size == b}
        (added,) = [x.factor for x in result.branches[4:] if x.batch_size == b]
        assert added == (0.5 if first[1.0] <= first[2.0] else 4.0)
    for reports in branch_reports:  # each branch starts from the reference's epoch-1 checkpoint
        assert reports[0][1]["val_loss"] == ref_epoch1["val_loss"] and reports[0][1]["steps"] == ref_epoch1["steps"]
        assert reports[-1][1]["epoch"] == 2
    n_train = int(ref_epoch1["examples"])
    big = [r for r, b in zip(branch_reports, result.branches) if b.batch_size == 64]
    assert all(r[-1][1]["steps"] == ref_epoch1["steps"] + math.ceil(n_train / 64) for r in big)
    best = best_per_batch(result.branches, 1)
    assert result.critical[1] == critical_batch({b: x.val_loss for b, x in best.items()}, s.epsilon)
    assert result.noise_scale[1] == ref_epoch1["b_simple"] > 0
    assert result.fixed["steps"] == ref_epoch1["steps"]  # 0.5 accuracy within the first epoch
    assert result.fixed["final_examples"] == result.scheduled["final_examples"] == 2 * n_train  # equal examples
    assert result.fixed["final_steps"] == 2 * math.ceil(n_train / 8)
    (row,) = csv.DictReader((tmp_path / "critical.csv").read_text().splitlines())
    assert row["critical_batch"] == str(result.critical[1])
    assert row["rate_at_grid_edge"].split() == [str(b) for b in at_grid_edge(result.branches, 1)]
    from search.scaling.branch_plot import plot_critical

    assert plot_critical(result, tmp_path / "critical.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = list(csv.DictReader((tmp_path / "branches.csv").read_text().splitlines()))
    assert {(int(r["batch_size"]), float(r["lr_factor"])) for r in rows} >= {(8, 1), (8, 2), (64, 1), (64, 2)}
    assert len(rows) == 6
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["critical"] == {"1": result.critical[1]} and summary["schedule"][0]["batch_size"] == 8
    assert set(summary) >= {"fixed", "scheduled", "fixed_last"}
    last = result.schedule[-1]
    assert last[1] in (8, 64)
    grows = len(result.schedule) > 1  # else the scheduled run and the last batch's are the reference, not run again
    assert (tmp_path / "fixed-last" / "checkpoint.pt").exists() == grows
    assert grows or result.scheduled == result.fixed_last == result.fixed


@pytest.mark.slow
def test_the_scheduled_run_changes_batch_and_rate_at_its_points(client: object, tmp_path: Path) -> None:
    s = BranchingSpec(points=(1,), batch_sizes=(8, 64), reference_batch=8, epochs=3)
    submit = dask_submit(client, "trainers.classifier:fit")
    reports = branch_run._run_scheduled(s, reference(3), [(0, 8, 0.02), (1, 64, 0.1)], tmp_path / "s", submit)
    by_epoch = {int(m["epoch"]): m for _, m in reports}
    n_train = int(by_epoch[1]["examples"])
    assert by_epoch[1]["steps"] == math.ceil(n_train / 8)
    assert by_epoch[3]["steps"] == math.ceil(n_train / 8) + 2 * math.ceil(n_train / 64)
    assert by_epoch[3]["examples"] == 3 * n_train
    assert by_epoch[1]["lr"] == pytest.approx(0.02) and by_epoch[3]["lr"] == pytest.approx(0.1)
