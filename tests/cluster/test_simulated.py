"""The simulated executor: virtual time, utilization, injected failures, and the real Campaign on top."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import optuna
import pytest

from cluster.executor import Finished, Report, Started, TrialRequest
from cluster.simulated import CurveModel, SimulatedExecutor, TableModel, TrialPlan, nb201_cell
from search.loop.campaign import Campaign
from search.store.folder import CampaignFolder

ROOT = Path(__file__).resolve().parents[2]
NB201 = ROOT / "bench" / "data" / "nb201_12epoch.csv"

pytestmark = pytest.mark.timeout(60)


class FixedModel:
    """Every trial: ``epochs`` epochs of ``seconds`` each; the metric is the trial number."""

    def __init__(self, seconds: float = 10.0, epochs: int = 1) -> None:
        self.seconds, self.epochs = seconds, epochs

    def plan(self, config, rng):
        n = float(config["number"])
        metrics = tuple({"score": n, "epoch": e + 1.0} for e in range(self.epochs))
        return TrialPlan((self.seconds,) * self.epochs, metrics)


def request(number: int, width: int = 1) -> TrialRequest:
    config = {"study": "sim", "number": number, "seed": number, "params": {}, "epochs": 1}
    return TrialRequest(number, "bench.trivial:fit", config, width)


def drain(executor: SimulatedExecutor) -> list:
    out = []
    for _ in range(10_000):
        batch = executor.events(timeout=0.25)
        if not batch:
            return out
        out.extend(batch)
    raise AssertionError("the simulation did not run dry")


# --- the executor alone ----------------------------------------------------------------------


def test_two_workers_four_fixed_trials_are_fully_busy() -> None:
    ex = SimulatedExecutor(2, FixedModel(10.0), controller_time_scale=0)
    for n in range(4):
        ex.submit(request(n))
    events = drain(ex)
    finished = {e.number: e.outcome for e in events if isinstance(e, Finished)}
    assert sorted(finished) == [0, 1, 2, 3]
    assert {n: (o.started, o.finished) for n, o in finished.items()} == {
        0: (0.0, 10.0),
        1: (0.0, 10.0),
        2: (10.0, 20.0),
        3: (10.0, 20.0),
    }
    assert ex.utilization() == pytest.approx(1.0)
    assert ex.makespan() == pytest.approx(20.0)
    assert ex.clock() == pytest.approx(20.0)


def test_three_trials_on_two_workers_leave_a_quarter_idle() -> None:
    ex = SimulatedExecutor(2, FixedModel(10.0), controller_time_scale=0)
    for n in range(3):
        ex.submit(request(n))
    drain(ex)
    assert ex.utilization() == pytest.approx(30.0 / (2 * 20.0))
    busy = ex.busy_intervals()
    assert sorted(busy) == ["sim-worker-0", "sim-worker-1"]
    assert sum(e - s for ivs in busy.values() for s, e in ivs) == pytest.approx(30.0)


def test_reports_then_finished_at_each_epoch_end_batched_by_time() -> None:
    ex = SimulatedExecutor(2, FixedModel(5.0, epochs=3), controller_time_scale=0)
    ex.submit(request(0))
    ex.submit(request(1))
    assert [(type(e).__name__, e.number, e.time) for e in ex.events(timeout=1.0)] == [
        ("Started", 0, 0.0),
        ("Started", 1, 0.0),
    ]
    first = ex.events(timeout=1.0)
    assert ex.clock() == 5.0
    assert [(type(e).__name__, e.number, e.step) for e in first] == [("Report", 0, 1), ("Report", 1, 1)]
    rest = drain(ex)
    assert [type(e).__name__ for e in rest[-2:]] == ["Report", "Finished"]
    outcome = rest[-1].outcome
    assert outcome.status == "ok" and outcome.metrics["epoch"] == 3.0
    assert [step for step, _m, _t in outcome.history] == [1, 2, 3]


def test_stop_ends_the_trial_at_its_next_report() -> None:
    ex = SimulatedExecutor(1, FixedModel(5.0, epochs=10), controller_time_scale=0)
    ex.submit(request(0))
    assert [type(e) for e in ex.events(1.0)] == [Started]
    assert [e.step for e in ex.events(1.0)] == [1]
    ex.stop(0)
    batch = ex.events(1.0)
    assert [type(e) for e in batch] == [Report, Finished]
    assert batch[1].outcome.stopped is True and batch[1].outcome.finished == 10.0
    assert ex.events(1.0) == []


def test_requests_queue_until_a_slot_frees() -> None:
    ex = SimulatedExecutor(1, FixedModel(10.0), slots_per_worker=2, controller_time_scale=0)
    ex.submit(request(0, width=2))
    ex.submit(request(1))
    events = drain(ex)
    starts = {e.number: e.outcome.started for e in events if isinstance(e, Finished)}
    assert starts == {0: 0.0, 1: 10.0}
    with pytest.raises(ValueError, match="needs 3 slots"):
        ex.submit(request(2, width=3))


def test_workers_that_join_over_time_start_the_waiting_trials_as_they_come() -> None:
    ex = SimulatedExecutor(4, FixedModel(10.0), join_seconds=8.0, controller_time_scale=0)
    for n in range(8):
        ex.submit(request(n))
    starts = sorted(e.outcome.started for e in drain(ex) if isinstance(e, Finished))
    # workers join at 0, 2, 4, 6 s and each runs a trial then the next of the queue, 10 s later
    assert starts == [0.0, 2.0, 4.0, 6.0, 10.0, 12.0, 14.0, 16.0]
    assert ex.down_intervals()["sim-worker-3"] == [(0.0, 6.0)]
    with pytest.raises(ValueError, match="join_seconds"):
        SimulatedExecutor(1, FixedModel(), join_seconds=-1.0)


class ByNumber:
    """Trial n runs for ``seconds[n]``."""

    def __init__(self, seconds: dict[int, float]) -> None:
        self.seconds = seconds

    def plan(self, config, rng):
        return TrialPlan((self.seconds[int(config["number"])],), ({"score": 0.0, "epoch": 1.0},))


def test_a_queued_request_starts_on_the_lowest_numbered_free_worker() -> None:
    """First fit, as a scan of the workers gave it, from a heap of the workers that may have a free slot."""
    ex = SimulatedExecutor(
        4, ByNumber({0: 5.0, 1: 3.0, 2: 1.0, 3: 4.0, 4: 1.0, 5: 1.0, 6: 1.0}), controller_time_scale=0
    )
    for n in range(7):
        ex.submit(request(n))  # 0..3 start at once; 4, 5, 6 queue
    finished = {e.number: e.outcome for e in drain(ex) if isinstance(e, Finished)}
    assert {n: finished[n].worker for n in range(4)} == {n: f"sim-worker-{n}" for n in range(4)}
    # worker 2 frees at 1 (trial 4 there, to 2), then worker 2 again at 2 (trial 5, to 3); at 3 workers 1 and 2
    # are free: trial 6 takes worker 1, the lower one
    assert [(finished[n].worker, finished[n].started) for n in (4, 5, 6)] == [
        ("sim-worker-2", 1.0),
        ("sim-worker-2", 2.0),
        ("sim-worker-1", 3.0),
    ]


def test_controller_time_is_charged_to_the_virtual_clock() -> None:
    now = [0.0]
    ex = SimulatedExecutor(1, FixedModel(10.0), timer=lambda: now[0])
    ex.submit(request(0))
    now[0] = 2.0  # the controller spent 2 real seconds after its first submit
    assert ex.clock() == 2.0
    assert [(type(e), e.time) for e in ex.events(1.0)] == [(Started, 0.0)]  # due while the controller worked
    assert ex.clock() == 2.0
    assert [e.number for e in ex.events(1.0) if isinstance(e, Finished)] == [0]
    assert ex.clock() == 10.0  # the trial started at 0 and ended at 10: no charge beyond it
    now[0] = 5.0  # 3 s to handle the result and ask the next trial
    ex.submit(request(1))
    drain(ex)
    assert ex.busy_intervals()["sim-worker-0"] == [(0.0, 10.0), (13.0, 23.0)]
    assert ex.utilization() == pytest.approx(20.0 / 23.0)


class SlowPlanModel(FixedModel):
    """A plan that takes ``plan_seconds`` of the (fake) real clock to draw: the simulator's work, not the controller's."""

    def __init__(self, now: list[float], plan_seconds: float) -> None:
        super().__init__(10.0)
        self.now, self.plan_seconds = now, plan_seconds

    def plan(self, config, rng):
        self.now[0] += self.plan_seconds
        return super().plan(config, rng)


def test_the_simulators_own_work_at_a_submit_is_not_charged_to_the_controller() -> None:
    now = [0.0]
    ex = SimulatedExecutor(2, SlowPlanModel(now, plan_seconds=4.0), timer=lambda: now[0])
    ex.submit(request(0))  # drawing its plan took 4 s of the real clock
    now[0] += 1.0  # the controller's own second before the next submit
    ex.submit(request(1))
    assert ex.clock() == 1.0
    drain(ex)
    assert ex.busy_intervals() == {"sim-worker-0": [(0.0, 10.0)], "sim-worker-1": [(1.0, 11.0)]}
    assert ex.controller_seconds == 1.0


def test_a_modelled_sampler_childs_time_leaves_the_controllers_clock_and_gates_the_trials_start() -> None:
    now = [0.0]
    ex = SimulatedExecutor(2, FixedModel(10.0), timer=lambda: now[0], sampler_process=True)
    ex.submit(request(0))  # the controller's clock starts
    now[0] += 1.0 + 3.0  # the controller's second, then 3 s of the child's ask on the loop's thread
    assert ex.sampler_work(3.0) == 4.0  # the child's core took it up when the controller's clock said 1 s
    assert ex.clock() == 1.0
    ex.params_ready(1, 4.0)
    ex.submit(request(1))  # submitted at 1 s; its parameters exist at 4 s
    now[0] += 2.0
    assert ex.sampler_work(2.0) == 6.0  # a tell the child records: queued behind the ask
    drain(ex)
    assert ex.busy_intervals() == {"sim-worker-0": [(0.0, 10.0)], "sim-worker-1": [(4.0, 14.0)]}
    assert ex.controller_seconds == 1.0 and ex.sampler_seconds == 5.0


def test_worker_failure_loses_its_trials_and_the_worker_comes_back() -> None:
    ex = SimulatedExecutor(
        2, FixedModel(10.0), slots_per_worker=2, failure_rate=0.999, recovery_seconds=7.0, controller_time_scale=0
    )
    for n in range(4):
        ex.submit(request(n))
    events = drain(ex)
    lost = [e for e in events if isinstance(e, Finished) and e.outcome.status == "lost"]
    assert lost and all("died" in e.outcome.error for e in lost)
    down = ex.down_intervals()
    for name, intervals in down.items():
        for died, back in intervals:
            assert back == pytest.approx(died + 7.0), name
    ex.submit(request(9))  # a worker is back: the next request runs
    assert any(isinstance(e, Finished) and e.number == 9 for e in drain(ex))


def test_bad_settings_are_rejected_with_the_value() -> None:
    with pytest.raises(ValueError, match="n_workers=0"):
        SimulatedExecutor(0, FixedModel())
    with pytest.raises(ValueError, match="failure_rate=1.5"):
        SimulatedExecutor(1, FixedModel(), failure_rate=1.5)
    with pytest.raises(ValueError, match="epoch_seconds"):
        TrialPlan((-1.0,), ({},))


# --- the models ------------------------------------------------------------------------------------


def test_table_model_ends_at_the_table_value() -> None:
    table = TableModel(NB201, trial_seconds=60.0, jitter=0.0)
    assert len(table) == 15_625
    ops = ["nor_conv_3x3", "nor_conv_3x3", "avg_pool_3x3", "skip_connect", "nor_conv_3x3", "skip_connect"]
    params = {f"e{i}": op for i, op in enumerate(ops)}
    assert table.cell_of(params) == nb201_cell(ops)
    row = table.lookup(params)
    assert row["cifar10-val"] == pytest.approx(82.834)  # row 1 of the CSV
    plan = table.plan({"params": params, "epochs": 12, "dataset": "cifar10"}, np.random.default_rng(0))
    accs = [m["accuracy"] for m in plan.metrics]
    assert accs[-1] == pytest.approx(82.834) and accs == sorted(accs)
    assert plan.duration == pytest.approx(60.0)
    assert table.best("cifar10") >= accs[-1]
    with pytest.raises(ValueError, match="not a NAS-Bench-201 op"):
        nb201_cell(["conv"] * 6)


def test_curve_model_is_a_seeded_function_of_params() -> None:
    model = CurveModel(seed=3, optimum={"lr": 1e-2}, jitter=0.2)
    near = model.asymptote({"lr": 1e-2})
    far = model.asymptote({"lr": 1.0})
    assert near > far
    a = model.plan({"params": {"lr": 1e-3}, "epochs": 8}, np.random.default_rng([0, 1]))
    b = model.plan({"params": {"lr": 1e-3}, "epochs": 8}, np.random.default_rng([0, 1]))
    assert a == b and len(a.epoch_seconds) == 8


# --- the real controller on top ----------------------------------------------------------------


def _campaign(tmp_path: Path, n_workers: int, n_trials: int, sampler: str = "random", **executor_kw):
    from bench.simulate import bench_spec, nb201_space, open_study

    spec = bench_spec(f"sim-{n_workers}", nb201_space(), sampler, n_trials, seed=7)
    folder = CampaignFolder(tmp_path / spec.study.name)
    folder.create(spec.text)
    study = open_study(spec, folder, "memory")
    executor_kw.setdefault("controller_time_scale", 0.0)
    cls = executor_kw.pop("cls", SimulatedExecutor)
    ex = cls(n_workers, TableModel(NB201, trial_seconds=60.0, jitter=0.1), seed=7, **executor_kw)
    Campaign(spec, folder, study, ex, clock=ex.clock).run()
    return study, ex


@pytest.mark.slow
def test_real_campaign_on_64_simulated_workers(tmp_path: Path) -> None:
    study, ex = _campaign(tmp_path, 64, 256)
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == 256
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert all(len(t.intermediate_values) == 12 for t in trials)
    starts = [s for ivs in ex.busy_intervals().values() for s, _e in ivs]
    assert ex.utilization(min(starts), max(starts)) == pytest.approx(1.0)  # a free controller refills at once
    assert 3 * 60.0 < ex.makespan() < 5 * 60.0 * 1.5  # about 4 waves of 60 s trials
    metrics = (tmp_path / "sim-64" / "trials" / "0" / "metrics.jsonl").read_text().splitlines()
    assert len(metrics) == 12 and json.loads(metrics[-1])["step"] == 12


class GateRecorder(SimulatedExecutor):
    """Records each start: (number, the controller's clock, when its parameters existed, the start)."""

    def __init__(self, *a, **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*a, **kw)
        self.starts: list[tuple[int, float, float, float]] = []

    def _start(self, request, worker, now):  # type: ignore[no-untyped-def]
        ready = self._params_ready.get(request.number, math.nan)
        super()._start(request, worker, now)
        self.starts.append((request.number, now, ready, self._runs[request.number].started))


@pytest.mark.parametrize("sampler, modelled", [("tpe", True), ("random", False)])
def test_a_simulated_campaign_samples_tpe_in_the_modelled_child_and_random_on_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sampler: str, modelled: bool
) -> None:
    import search.loop.campaign as campaign_module
    from search.sampling.tpe import RefitTPESampler

    made: list[Campaign] = []
    monkeypatch.setattr(campaign_module.Campaign, "run", _keeping(campaign_module.Campaign.run, made))
    study, ex = _campaign(tmp_path, 16, 64, sampler, controller_time_scale=1.0, sampler_process=True, cls=GateRecorder)
    assert made[0].supply.sampling == ("process" if modelled else "inline")
    assert [t.state for t in study.get_trials(deepcopy=False)] == [optuna.trial.TrialState.COMPLETE] * 64
    assert (ex.sampler_seconds > 0) == modelled
    assert len(ex.starts) == 64 and not ex._params_ready  # every gate was used once
    for number, now, ready, started in ex.starts:
        assert started == (max(now, ready) if modelled else now), number
    if modelled:
        assert type(study.sampler) is RefitTPESampler  # the child's sampler, back with the campaign


def _keeping(run, made):  # type: ignore[no-untyped-def]
    def keep(self):  # type: ignore[no-untyped-def]
        made.append(self)
        return run(self)

    return keep


def test_injected_failures_are_lost_trials_and_the_campaign_finishes(tmp_path: Path) -> None:
    study, ex = _campaign(tmp_path, 16, 96, failure_rate=0.2, recovery_seconds=30.0)
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == 96
    failed = [t for t in trials if t.state == optuna.trial.TrialState.FAIL]
    assert ex.counts["lost"] > 0 and len(failed) <= ex.counts["lost"]  # the campaign may retry a lost trial
    assert all(t.user_attrs["fail_reason"].startswith("worker lost") for t in failed)
    assert ex.counts["lost"] == len(failed) + sum(int(t.user_attrs.get("retries", 0)) for t in trials)
    assert all(t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL) for t in trials)


def test_same_seed_same_campaign(tmp_path: Path) -> None:
    def fingerprint(study: optuna.Study) -> list:
        return [
            (t.number, t.params, t.value, t.user_attrs["started"], t.user_attrs["finished"])
            for t in study.get_trials(deepcopy=False)
        ]

    runs = [_campaign(tmp_path / str(i), 16, 48, sampler="tpe", failure_rate=0.1) for i in range(2)]
    assert fingerprint(runs[0][0]) == fingerprint(runs[1][0])
    assert runs[0][1].busy_intervals() == runs[1][1].busy_intervals()
    assert not any(
        math.isnan(v)
        for v in itertools.chain.from_iterable(
            (t.value,) for t in runs[0][0].get_trials(deepcopy=False) if t.value is not None
        )
    )


def test_a_fresh_trials_folder_is_not_read_back_for_an_earlier_controllers_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import search.loop.intermediate as intermediate

    read: list[Path] = []
    original = intermediate.read_metrics_lines
    monkeypatch.setattr(intermediate, "read_metrics_lines", lambda path: read.append(path) or original(path))
    study, _ex = _campaign(tmp_path, 4, 12)
    assert len(study.get_trials(deepcopy=False)) == 12
    assert read == []  # every trial was asked by this controller into a new folder: nothing to read back
