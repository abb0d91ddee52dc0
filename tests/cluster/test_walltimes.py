"""The batch-job walltime rule (cluster/walltimes.py): a worker's job takes a trial only when the trial is predicted,
by the trial model the executor reads (its campaign's), to end before the job does. Unit tests of the decision, and
the slot runners following it on a real in-process Dask cluster whose workers' job ends are set on the scheduler
(as a JobKeeper records them; the SLURM jobs themselves: tests/cluster/test_slurm_jobs.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import pytest
from inproc import inproc_client

from cluster.executor import DaskExecutor, Finished, Started, TrialRequest
from cluster.jobs import DEADLINES_KEY
from cluster.trial_cost import Estimate, ModelPredictions, Resources, TrialCostModel
from cluster.trial_cost.estimate import UNKNOWN, duration_text
from cluster.walltimes import FRESH, Walltimes

NOW = 1_000_000.0


def _request(number: int, size: float, width: int = 1, epochs: int = 1, start: int = 0) -> TrialRequest:
    config = {"study": "w", "number": number, "params": {"size": size}, "seed": number, "epochs": epochs}
    return TrialRequest(number, "tests:nothing", config, width=width, start_epoch=start)  # type: ignore[arg-type]


def _model(durations: Mapping[float, float]) -> TrialCostModel:
    """A trial model that saw one full run of each ``size`` -> seconds."""
    model = TrialCostModel()
    for size, seconds in durations.items():
        model.observe_run(None, {"size": size}, Resources(), seconds, full=True)
    return model


def _walltimes(ends: Mapping[str, float], model: TrialCostModel) -> Walltimes:
    walltimes = Walltimes(lambda: ends, lambda: ModelPredictions(model), clock=lambda: NOW)
    walltimes.refresh()
    return walltimes


def test_a_long_and_a_short_trial_on_the_same_job_end_are_judged_each_by_its_own_predicted_duration() -> None:
    """A job with 100 s left: a trial predicted at 20 s starts there, one predicted at 300 s does not (the median of
    the runs seen, 20 s, said both would fit); a third trial of the short kind queued behind a running long one
    waits for its predicted end; a worker of no batch job takes anything."""
    model = _model({1.0: 20.0, 2.0: 20.0, 30.0: 300.0})
    walltimes = _walltimes({"tcp://job:1": NOW + 100.0, "tcp://fresh:1": NOW + 1000.0}, model)
    short, long = _request(1, 1.0), _request(2, 30.0)
    left = walltimes.time_left("tcp://job:1")
    assert left == pytest.approx(100.0)
    assert walltimes.predicted(short).mean == pytest.approx(20.0)
    assert walltimes.predicted(long).mean == pytest.approx(300.0)
    assert walltimes.fits(short, left)
    assert not walltimes.fits(long, left)
    assert walltimes.fits(long, walltimes.time_left("tcp://fresh:1"))
    assert walltimes.time_left("tcp://other:1") is None and walltimes.fits(long, None)
    behind = walltimes.time_left("tcp://job:1", [(_request(3, 1.0), NOW - 10.0)])  # 10 s of 20 s run: 10 s more
    assert behind == pytest.approx(90.0) and walltimes.fits(short, behind)
    behind_long = walltimes.time_left("tcp://fresh:1", [(_request(4, 30.0), NOW - 100.0)])  # 200 s more
    assert behind_long == pytest.approx(800.0)
    assert walltimes.fits(short, walltimes.time_left("tcp://job:1", [(_request(5, 1.0), None)]))  # 100 - 20 > 20


def test_the_line_names_the_trials_predicted_duration_and_the_jobs_time_left() -> None:
    walltimes = _walltimes({"tcp://job:1": NOW + 100.0}, _model({30.0: 300.0}))
    predicted = walltimes.predicted(_request(7, 30.0))
    span = f"({duration_text(predicted.low)}-{duration_text(predicted.high)})"
    assert predicted.low < predicted.mean < predicted.high
    assert walltimes.held_line(_request(7, 30.0), 95.0) == (
        f"trial 7 is predicted to take 5m00s {span} but no worker's batch job has more than 1m35s left when it "
        "could start there: it waits for a job with the time"
    )


def test_a_trial_that_resumes_at_epoch_k_of_n_is_judged_by_the_epochs_it_has_left() -> None:
    """A 10-epoch trial predicted at 300 s for its full run, on a job with 100 s left: from scratch it waits; resumed
    at epoch 8 (its checkpoint after a walltime cut, a later segment) it has 60 s left and starts; at epoch 5, 150 s,
    and it waits, the line saying which epochs that is. A new run of it from another epoch is predicted anew; the
    median of the recent runs, where the model knows nothing, is scaled the same way."""
    walltimes = _walltimes({"tcp://job:1": NOW + 100.0, "tcp://fresh:1": NOW + 1000.0}, _model({30.0: 300.0}))
    left = walltimes.time_left("tcp://job:1")
    assert not walltimes.fits(_request(1, 30.0, epochs=10), left)
    resumed = _request(1, 30.0, epochs=10, start=8)
    assert walltimes.predicted(resumed).mean == pytest.approx(60.0)
    assert walltimes.fits(resumed, left)
    halfway = _request(1, 30.0, epochs=10, start=5)
    assert walltimes.predicted(halfway).mean == pytest.approx(150.0) and not walltimes.fits(halfway, left)
    assert walltimes.held_line(halfway, 100.0).startswith("trial 1 is predicted to take 2m30s (")
    assert "for epochs 6-10 (it resumes at epoch 5) but no worker's batch job has more than 1m40s left" in (
        walltimes.held_line(halfway, 100.0)
    )
    behind = walltimes.time_left("tcp://job:1", [(resumed, None)])  # queued: its 60 s, not its full 300 s
    assert behind == pytest.approx(40.0)
    median = Walltimes(lambda: {"tcp://job:1": NOW + 100.0}, lambda: _Median(150.0), clock=lambda: NOW)
    median.refresh()
    assert median.predicted(_request(2, 1.0, epochs=4, start=3)).mean == pytest.approx(37.5)
    with pytest.raises(ValueError, match="start_epoch=11: must be in 0..epochs \\(10\\)"):
        _request(3, 1.0, epochs=10, start=11)


class _Median:
    """A trial model that knows nothing of any configuration but the median of the recent runs (the protocol an
    executor reads, :class:`cluster.trial_cost.TrialPredictions`)."""

    def __init__(self, median: float | None) -> None:
        self.model = TrialCostModel()
        self.median = median

    def duration(self, params: Mapping[str, Any], width: int, epochs: int) -> Estimate:
        return UNKNOWN

    def typical_run(self) -> float | None:
        return self.median


def test_where_the_model_knows_nothing_of_a_trial_the_median_of_the_recent_runs_stands_in() -> None:
    ends = {"tcp://job:1": NOW + 100.0, "tcp://fresh:1": NOW + 1000.0}
    median = Walltimes(lambda: ends, lambda: _Median(150.0), clock=lambda: NOW)
    median.refresh()
    assert median.predicted(_request(1, 1.0)).mean == 150.0
    assert not median.fits(_request(1, 1.0), median.time_left("tcp://job:1"))
    assert "(the median of the recent runs)" in median.held_line(_request(1, 1.0), 100.0)
    nothing = Walltimes(lambda: ends, lambda: _Median(None), clock=lambda: NOW)
    nothing.refresh()
    assert nothing.fits(_request(1, 1.0), nothing.time_left("tcp://job:1"))  # before any run ended: any trial


def test_a_trial_longer_than_any_job_starts_on_a_fresh_one_instead_of_waiting_for_ever() -> None:
    """Jobs seen with at most 100 s: a trial predicted at 500 s fits none, so it starts on a job with at least
    FRESH of that left (and runs in pieces, resumed at each job's end), never on one near its end."""
    walltimes = _walltimes({"tcp://fresh:1": NOW + 100.0, "tcp://old:1": NOW + 40.0}, _model({50.0: 500.0}))
    longest = _request(1, 50.0)
    assert walltimes.fits(longest, walltimes.time_left("tcp://fresh:1"))
    assert not walltimes.fits(longest, walltimes.time_left("tcp://old:1"))
    assert not walltimes.fits(longest, FRESH * 100.0)


def _fit(config: Any, reporter: Any) -> dict[str, float]:
    reporter.report(1, {"score": 1.0})
    return {"score": 1.0}


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_slot_runners_give_each_trial_a_worker_whose_job_has_the_time_for_it_and_say_when_none_has(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two workers whose jobs end in 300 s and 400 s (a third job, seen with 1,000 s, has no worker now), and the
    trial model handed to the executor: a trial predicted at 350 s runs on the 400 s job, one of 10 s on either, and
    one of 500 s on neither (it waits for a job with the time): one line says so, with its prediction. The same
    500 s trial resumed at epoch 9 of 10 has 50 s left, and runs."""
    model = _model({10.0: 10.0, 35.0: 350.0, 50.0: 500.0})
    with inproc_client(2, 1) as client:
        a, b = sorted(client.scheduler_info()["workers"])
        now = time.time()
        client.set_metadata(list(DEADLINES_KEY), {a: now + 300.0, b: now + 400.0, "tcp://gone:1": now + 1000.0})
        executor = DaskExecutor(client, "walltimes")
        executor.predict_with(ModelPredictions(model))
        assert executor.costs().model is model
        caplog.set_level(logging.WARNING, logger="cluster")
        for number, size, epochs, start in ((0, 50.0, 1, 0), (1, 10.0, 1, 0), (2, 35.0, 1, 0), (3, 50.0, 10, 9)):
            config = {"study": "w", "number": number, "params": {"size": size}, "seed": number, "epochs": epochs}
            executor.submit(TrialRequest(number, _fit, config, start_epoch=start))  # type: ignore[arg-type]
        started: dict[int, str] = {}
        finished: set[int] = set()
        deadline = time.monotonic() + 60
        while finished != {1, 2, 3}:
            assert time.monotonic() < deadline, f"finished {sorted(finished)}, started {started}"
            for event in executor.events(0.5):
                if isinstance(event, Started):
                    started[event.number] = event.worker
                elif isinstance(event, Finished):
                    finished.add(event.number)
        executor.events(0.5)  # one more look: trial 0 still has no job with the time
        executor.close()
    assert started[2] == b, started
    assert 0 not in started, started
    lines = [r.getMessage() for r in caplog.records if "waits for a job with the time" in r.getMessage()]
    assert len(lines) == 1, lines
    assert (
        lines[0].startswith("trial 0 is predicted to take 8m20s (")
        and "no worker's batch job has more than 6m" in lines[0]
    )
