"""Data-parallel trials of a trainer no rank could import: shipped to its ranks by value (cloudpickle).

A closure (what cloudpickle ships by value, like a script's or notebook's function) launches
itself as 2 gloo ranks on the CPU, by function or, on a worker, by its entry; and a notebook-like
session's ``__main__`` trainer runs a real campaign of data-parallel trials.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from cluster.entrypoint import TrainerShipment
from trainers.api import RecordingReporter, Reporter, TrialConfig, entry_of, registered_trainer, running_trainer
from trainers.ddp import launch, rank_trainer
from trainers.ddp_rank import current_rank, process_group

ROOT = Path(__file__).resolve().parents[2]


def make_trainer(scale: float, by_entry: bool = False) -> Any:
    """A closure: its ranks all-reduce ``scale * (rank + 1)``; it launches itself by function or by its entry."""

    def fit(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
        rank = current_rank()
        if rank is None:
            return launch(entry_of(fit) if by_entry else fit, config, reporter)
        with process_group(torch.device("cpu")):
            total = torch.tensor([scale * (rank.rank + 1)])
            dist.all_reduce(total)
            metrics = {"total": float(total.item()), "world": float(rank.world_size)}
            for epoch in range(1, config.epochs + 1):
                reporter.report(epoch, {**metrics, "epoch": float(epoch)})
                if reporter.should_stop():
                    break
            return metrics

    return fit


def config(epochs: int = 2) -> TrialConfig:
    return TrialConfig("by-value", 0, {}, seed=0, epochs=epochs, device="cpu", data_parallel=2)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_closure_launches_itself_as_two_ranks() -> None:
    reporter = RecordingReporter()
    assert make_trainer(1.5)(config(), reporter) == {"total": 4.5, "world": 2.0}  # 1.5 * 1 + 1.5 * 2
    assert reporter.reports == [
        (1, {"total": 4.5, "world": 2.0, "epoch": 1.0}),
        (2, {"total": 4.5, "world": 2.0, "epoch": 2.0}),
    ]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_trainer_shipped_by_value_launches_its_ranks_by_its_entry() -> None:
    """As on a worker: the shipment unpickled, and its entry (not importable) names it while it runs."""
    fn = make_trainer(2.0, by_entry=True)
    entry = entry_of(fn)
    assert "<locals>" in entry and registered_trainer(entry) is None
    shipped = pickle.loads(pickle.dumps(TrainerShipment.by_value(entry, fn))).load()
    reporter = RecordingReporter(stop_after=1)
    with running_trainer(entry, shipped):
        assert shipped(config(epochs=5), reporter) == {"total": 6.0, "world": 2.0}
    assert [step for step, _ in reporter.reports] == [1]  # the stop reached both ranks
    assert registered_trainer(entry) is None


def test_a_running_trainer_is_named_in_its_own_thread_only() -> None:
    fn, seen = make_trainer(1.0), []
    with running_trainer("somewhere:fit", fn):
        thread = threading.Thread(target=lambda: seen.append(registered_trainer("somewhere:fit")))
        thread.start()
        thread.join()
        assert registered_trainer("somewhere:fit") is fn and rank_trainer("somewhere:fit")[1] is not None
    assert seen == [None] and rank_trainer("somewhere:fit") == ("somewhere:fit", None)  # the ranks import it


def test_an_unpicklable_trainer_is_a_one_line_error_before_any_rank_starts() -> None:
    lock = threading.Lock()

    def fit(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
        with lock:
            return {}

    with pytest.raises(TypeError, match=r"^trainer .*fit cannot be pickled for its data-parallel ranks \(TypeError"):
        rank_trainer(fit)


NOTEBOOK = """
import search
import torch
import torch.distributed as dist
from trainers.ddp import launch
from trainers.ddp_rank import current_rank, process_group

OFFSET = 0.5   # a global of the session: each rank must see it

def fit(config, reporter):
    rank = current_rank()
    if rank is None and config.data_parallel > 1:
        return launch(f"{__name__}:fit", config, reporter)   # "__main__:fit": no rank could import it
    with process_group(torch.device("cpu")):
        offsets = torch.tensor([OFFSET])
        dist.all_reduce(offsets)   # summed over the 2 ranks: 1.0
        metrics = {"score": config.params["quality"] + float(offsets.item())}
        reporter.report(1, metrics)
        return metrics

result = search.run({
    "study": {"name": "ddp", "direction": "maximize", "metric": "score", "sampler": "random", "seed": 1,
              "n_trials": 2},
    "trainer": {"epochs": 1, "device": "cpu", "data_parallel": 2},
    "space": {"quality": {"type": "float", "low": 0.0, "high": 1.0}},
    "cluster": {"n_workers": 1, "slots_per_worker": 2},
}, trainer=fit, progress=False)
print("RESULT", result.trials.to_json(orient="records"))
"""


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_notebook_trainer_runs_data_parallel_trials_in_a_campaign(tmp_path: Path) -> None:
    # `python -` reads the session from stdin: a __main__ without a file, as in a notebook.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_CURRENT_TEST")}
    proc = subprocess.run(
        [sys.executable, "-"],
        input=textwrap.dedent(NOTEBOOK),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=220,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    rows = json.loads(line.removeprefix("RESULT "))
    assert [r["state"] for r in rows] == ["COMPLETE", "COMPLETE"], rows
    assert [r["score"] for r in rows] == pytest.approx([r["params.quality"] + 1.0 for r in rows])
