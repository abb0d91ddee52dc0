"""[elastic] faults on the CPU twin: a worker SIGKILLed while a grown trial's 2 ranks span both workers (real Dask
scheduler and workers as separate processes, the project's trainer, torch DDP over gloo); the trial is retried from
its checkpoint at the width the one worker left holds, and completes with every epoch's examples seen once."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from dask_processes import external_cluster, wait_for

from search.loop.elastic import ElasticGrowth
from search.loop.segments import Segment
from search.loop.trials import RunningTrial
from search.spec.elastic import ElasticSpec
from search.store.records import Attr
from search.vocab.terms import Transition
from tests.campaign_storage import load
from tests.search.toy_specs import digits_toml
from trainers.api import TrialConfig

pytestmark = pytest.mark.slow

EPOCHS = 12

SPEC = digits_toml(
    "elastic-lost",
    epochs=EPOCHS,
    max_retries=1,
    pruner="asha",
    cluster={"worker_timeout": 60, "n_workers": None, "slots_per_worker": None},
    top={"pruner": {"min_resource": 1, "reduction_factor": 2}, "elastic": {"widths": [1, 2], "reserve": 0}},
)


def reports(folder: Path) -> list[dict]:
    path = folder / "trials" / "0" / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.exists() else []


def at_two_slots(folder: Path) -> bool:
    """Trial 0 reported an epoch of a 2-slot segment that is not its segment's last (rungs at 1, 2, 4, 8)."""
    return any(r["step"] in (3, 5, 6, 7) for r in reports(folder))


@pytest.mark.timeout(600)
def test_a_worker_lost_in_a_2_slot_segment_retries_the_trial_at_1_slot_from_its_checkpoint(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    spec = tmp_path / "elastic-lost.toml"
    spec.write_text(SPEC)
    runs = tmp_path / "runs"
    folder = runs / "elastic-lost"
    with external_cluster(tmp_path / "dask", 2) as cluster:
        args = ["run", str(spec), "--runs-dir", str(runs), "--scheduler", cluster.address, "--no-progress"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "search", *args],
            env=subprocess_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            wait_for(lambda: at_two_slots(folder) or proc.poll() is not None, 300, "a report at 2 slots")
            assert proc.poll() is None, proc.communicate()[1]
            # before the kill: the surviving rank's run can end (gloo: connection reset) before kill_worker's wait
            # for the killed process returns, and the lost run's end was then seen as before the kill (CI, once)
            killed_at = time.time()
            cluster.kill_worker("w1")  # SIGKILL: one of the two workers the trial's ranks span
            try:
                _out, err = proc.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGUSR1)  # the controller writes every thread's stack (search.cli)
                time.sleep(2)
                proc.kill()
                _out, err = proc.communicate(timeout=30)
                raise AssertionError(f"the controller did not end within 300 s of the kill:\n{err[-20000:]}") from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    assert proc.returncode == 0, err
    (trial,) = load(folder, "elastic-lost").get_trials()
    assert trial.state is optuna.trial.TrialState.COMPLETE, trial.user_attrs
    segments = [Segment.from_record(r) for r in trial.user_attrs[Attr.SEGMENTS]]
    lost = next(i for i, s in enumerate(segments) if s.width == 2 and any(run[1] >= killed_at for run in s.runs))
    cut, retry = segments[lost], segments[lost + 1]
    assert (retry.transition, retry.width, retry.start_epoch) == (Transition.RESIZE, 1, cut.end_epoch)
    assert cut.start_epoch < cut.end_epoch  # it had reported at 2 slots: cut at its last report, its checkpoint
    assert [(s.transition, s.width) for s in segments[lost + 2 :]] == [(Transition.CONTINUE, 1)] * (
        len(segments) - lost - 2
    )
    assert segments[-1].end_epoch == EPOCHS
    history = dict(trial.user_attrs[Attr.HISTORY])
    assert sorted(history) == list(range(1, EPOCHS + 1))  # each epoch once: none skipped, none twice
    n = int(history[1]["examples"])
    assert [int(history[e]["examples"]) for e in range(1, EPOCHS + 1)] == [n * e for e in range(1, EPOCHS + 1)]
    assert retry.examples == n * retry.start_epoch  # the retry goes on where the checkpoint left off
    assert history[EPOCHS]["steps"] == EPOCHS * math.ceil(n / 32)  # batch = "fixed": the same steps per epoch
    assert trial.user_attrs["retries"] == 1
    assert [r["step"] for r in reports(folder)] == list(range(1, EPOCHS + 1))  # metrics.jsonl: each epoch once


@pytest.mark.parametrize(("reported", "cut", "end"), [(3, 3, 4), (4, 4, 8)])
def test_a_lost_wide_run_is_retried_narrower_from_its_last_reported_epoch_even_its_segments_last(
    reported: int, cut: int, end: int
) -> None:
    """A 2-slot segment (epochs 2..4 of 8) lost after its report at ``reported``: the retry at 1 slot starts there,
    with the examples seen there. The test suite's kill landed once after the segment's last report (epoch 4) and
    before its end was told: the retry was recorded from epoch 3 with epoch 4's examples."""
    study = optuna.create_study()
    trial = study.ask()
    config = TrialConfig("s", trial.number, {}, 0, 4, data_parallel=2, schedule_epochs=8)
    running = RunningTrial(trial, config, 2, 0.0, started_at=0.0)
    running.segments = [Segment(0, Transition.START, 1, 0, 2), Segment(1, Transition.RESIZE, 2, 2, 4)]
    for epoch in range(1, reported + 1):
        running.keep_report(epoch, {"epoch": float(epoch), "examples": 100.0 * epoch}, float(epoch))
    growth = ElasticGrowth(ElasticSpec((1, 2, 4), grow="goodput"), rungs=())
    found = growth.narrower_retry(running.view(), room=1)
    assert found is not None
    at, step = found
    segment = step.segment
    assert (at, segment.start_epoch, segment.end_epoch, segment.width, segment.examples) == (
        cut, cut, end, 1, 100 * cut,
    )  # fmt: skip
    assert step.config.epochs == end and step.config.data_parallel == 1
