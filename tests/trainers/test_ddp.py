"""Data-parallel trials: k gloo rank processes on the CPU, launched by trainers.ddp.

Why k=2 and k=1 agree only closely, not bit for bit: both train on the same
global batches (same shuffle, same global batch B), but with k=2 each replica
computes the gradient of its half and gloo sums the two halves, while one
process sums all B per-example terms in one matmul. Float32 addition is not
associative, so each step's gradient differs in the last bits (~1e-7 relative),
and SGD carries that along. Losses are also summed in another order. Over 2-3
epochs on digits the final losses differ by ~1e-8 (measured); the tests allow
1e-4 relative, and one validation example for the accuracy.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
import torch

from trainers.api import RecordingReporter, Reporter, TrialConfig
from trainers.classifier import fit
from trainers.data import micro_batches, shard
from trainers.ddp import RankError, _visible_id, launch, rank_devices

ENTRY = "trainers.classifier:fit"
N_VAL = 359  # digits validation rows
LOSS_RTOL = 1e-4
PARAMS = {"lr": 0.05, "batch_size": 32}


def _alive(pid: int) -> bool:
    """Whether ``pid`` is still a (non-zombie) rank process, from /proc (no psutil)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z" and b"trainers.ddp_rank" in cmdline


def _assert_close(a: Mapping[str, float], b: Mapping[str, float]) -> None:
    assert a["steps"] == b["steps"] and a["examples"] == b["examples"] and a["epoch"] == b["epoch"]
    for key in ("train_loss", "val_loss"):
        assert a[key] == pytest.approx(b[key], rel=LOSS_RTOL), key
    assert abs(a["val_accuracy"] - b["val_accuracy"]) <= 1 / N_VAL + 1e-12


@pytest.fixture(scope="module")
def k2_run() -> list[tuple[int, dict[str, float]]]:
    """The reports of one 2-epoch k=2 digits trial (shared by the agreement and resume tests)."""
    reporter = RecordingReporter()
    fit(TrialConfig("test", 0, PARAMS, seed=7, epochs=2, device="cpu", data_parallel=2), reporter)
    return reporter.reports


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_k2_agrees_with_k1_at_the_same_global_batch(make_config, k2_run) -> None:
    single = RecordingReporter()
    fit(make_config(PARAMS, epochs=2), single)
    assert [step for step, _ in k2_run] == [1, 2]
    for (_, one), (_, two) in zip(single.reports, k2_run, strict=True):
        _assert_close(one, two)
    assert k2_run[-1][1]["examples"] == 2 * 1438 and k2_run[-1][1]["steps"] == 2 * 45  # global, not per replica
    assert k2_run[-1][1]["n_params"] == single.reports[-1][1]["n_params"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_k2_resumes_from_its_checkpoint_exactly(make_config, k2_run, tmp_path: Path, without_timing) -> None:
    config = make_config(PARAMS, epochs=2, data_parallel=2, checkpoint_dir=str(tmp_path))
    first = RecordingReporter(stop_after=1)
    fit(config, first)
    assert (tmp_path / "checkpoint.pt").exists()
    resumed = RecordingReporter()
    final = fit(config, resumed)
    assert [step for step, _ in resumed.reports] == [1, 2]  # the checkpoint's report again, then epoch 2
    assert resumed.reports[:1] == first.reports
    assert without_timing(final) == without_timing(k2_run[-1][1])


@pytest.mark.slow
@pytest.mark.timeout(300)  # a hang guard only: the asserts, not the clock, say whether the stop took effect
def test_stop_request_ends_every_rank_after_the_first_epoch(make_config) -> None:
    pids: list[int] = []
    reporter = RecordingReporter(stop_after=1)
    final = launch(ENTRY, make_config(PARAMS, epochs=50, data_parallel=2), reporter, on_start=pids.extend)
    # Stopped after epoch 1 of 50, whatever the wall clock: one epoch's global steps and examples, no more.
    assert [step for step, _ in reporter.reports] == [1] and final["epoch"] == 1.0
    assert final["steps"] == 45 and final["examples"] == 1438
    assert len(pids) == 2 and not any(_alive(pid) for pid in pids)


def fit_failing_on_rank_1(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    """The classifier, but rank 1 raises at its first report (rank 0 is then waiting in a collective)."""

    class Failing:
        def report(self, step: int, metrics: Mapping[str, float]) -> None:
            if os.environ["RANK"] == "1":
                raise RuntimeError("rank 1 fails on purpose")
            reporter.report(step, metrics)

        def should_stop(self) -> bool:
            return reporter.should_stop()

    return fit(config, Failing())


class _BlocksWhenFreed:
    """An object whose teardown never ends, like a DDP model whose gloo group waits for the GIL to be freed."""

    def __del__(self) -> None:
        time.sleep(600)


def fit_failing_with_a_teardown_that_blocks(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    """Rank 1 raises while its frame (kept by the traceback) holds an object that blocks when freed."""
    if os.environ["RANK"] == "1":
        held = _BlocksWhenFreed()  # noqa: F841 - freed only with the traceback
        raise RuntimeError("rank 1 fails holding a teardown that blocks")
    return fit(config, reporter)  # waits for rank 1 at the rendezvous


def fit_killed_on_rank_1(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    """Rank 1 dies by SIGKILL (no traceback); rank 0 waits for it at the rendezvous."""
    if os.environ["RANK"] == "1":
        os.kill(os.getpid(), signal.SIGKILL)
    return fit(config, reporter)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_failing_rank_fails_the_trial_with_its_traceback(make_config) -> None:
    pids: list[int] = []
    reporter = RecordingReporter()
    config = make_config(PARAMS, epochs=50, data_parallel=2)
    with pytest.raises(RankError, match=r"rank 1 of 2 failed: RuntimeError: rank 1 fails on purpose") as info:
        launch(f"{__name__}:fit_failing_on_rank_1", config, reporter, on_start=pids.extend)
    assert info.value.rank == 1
    assert "Traceback (most recent call last)" in str(info.value) and ", in report" in str(info.value)
    assert 'raise RuntimeError("rank 1 fails on purpose")' in str(info.value)
    # Whether rank 0's epoch-1 report reached the launcher before rank 1's exit did is timing;
    # no later report can: rank 0's epoch 2 needs rank 1's gradients.
    assert [step for step, _ in reporter.reports] in ([], [1])
    assert len(pids) == 2 and not any(_alive(pid) for pid in pids)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_failing_rank_exits_without_tearing_down_its_trainer(make_config) -> None:
    # A failed rank that ran its trainer's teardown could hang there (see trainers.ddp_rank._exit_failed)
    # and the trial would not fail; here the teardown blocks for sure, so only exiting at once passes.
    pids: list[int] = []
    with pytest.raises(RankError, match=r"rank 1 of 2 failed: RuntimeError: rank 1 fails holding") as info:
        launch(
            f"{__name__}:fit_failing_with_a_teardown_that_blocks",
            make_config(PARAMS, data_parallel=2),
            RecordingReporter(),
            timeout=120,
            on_start=pids.extend,
        )
    assert info.value.rank == 1 and 'raise RuntimeError("rank 1 fails holding' in info.value.traceback
    assert len(pids) == 2 and not any(_alive(pid) for pid in pids)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_killed_rank_fails_the_trial_and_no_rank_survives(make_config) -> None:
    pids: list[int] = []
    with pytest.raises(RankError, match=r"rank 1 of 2 was killed by SIGKILL") as info:
        launch(
            f"{__name__}:fit_killed_on_rank_1",
            make_config(PARAMS, data_parallel=2),
            RecordingReporter(),
            on_start=pids.extend,
        )
    assert info.value.rank == 1
    assert len(pids) == 2 and not any(_alive(pid) for pid in pids)


def fit_sleeping(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    time.sleep(600)
    return {}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_timeout_kills_every_rank(make_config) -> None:
    pids: list[int] = []
    with pytest.raises(TimeoutError, match="2 ranks"):
        launch(
            f"{__name__}:fit_sleeping",
            make_config(PARAMS, data_parallel=2),
            RecordingReporter(),
            timeout=3.0,
            grace=1.0,
            on_start=pids.extend,
        )
    assert len(pids) == 2 and not any(_alive(pid) for pid in pids)


def fit_listing_listeners(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    """Rank 0, once both ranks are in the gloo group: every listening socket of the launcher and the ranks."""
    import psutil
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        metrics: dict[str, float] = {}
        if dist.get_rank() == 0:
            launcher = psutil.Process(os.getppid())
            sockets = [
                (c.laddr.ip, c.laddr.port)
                for p in (launcher, *launcher.children())
                for c in p.net_connections("tcp")
                if c.status == psutil.CONN_LISTEN
            ]
            store = ("127.0.0.1", int(os.environ["MASTER_PORT"]))
            metrics = {
                "listeners": float(len(sockets)),
                "off_loopback": float(sum(ip != "127.0.0.1" for ip, _ in sockets)),
                "store_on_loopback": float(store in sockets),
            }
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return metrics


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_rendezvous_store_and_the_ranks_listen_on_loopback_only(make_config) -> None:
    # TCPStore given the host 127.0.0.1 still listened on every interface ('::'); now it serves on a socket
    # the launcher bound to loopback, and gloo (GLOO_SOCKET_IFNAME=lo) listens there too.
    metrics = launch(f"{__name__}:fit_listing_listeners", make_config(PARAMS, data_parallel=2), RecordingReporter())
    assert metrics["store_on_loopback"] == 1.0
    assert metrics["listeners"] >= 1 and metrics["off_loopback"] == 0.0, metrics


@pytest.mark.timeout(120)
def test_batch_size_not_divisible_by_k_is_a_clear_error_before_any_launch(make_config) -> None:
    reporter = RecordingReporter()
    with pytest.raises(ValueError, match=r"params.batch_size=30 with data_parallel=4: .* multiple of data_parallel"):
        fit(make_config({"lr": 0.05, "batch_size": 30}, data_parallel=4), reporter)
    with pytest.raises(ValueError, match=r"options.max_micro_batch=0"):
        fit(make_config(PARAMS, data_parallel=2, options={"max_micro_batch": 0}), reporter)
    with pytest.raises(ValueError, match="schedule.family"):
        fit(make_config({**PARAMS, "schedule": "linear"}, data_parallel=2), reporter)
    assert reporter.reports == []


@pytest.mark.timeout(300)
def test_gradient_accumulation_keeps_the_global_batch(make_config, without_timing) -> None:
    plain, accumulated = RecordingReporter(), RecordingReporter()
    params = {"lr": 0.05, "batch_size": 64}
    fit(make_config(params, epochs=2), plain)
    fit(make_config(params, epochs=2, options={"max_micro_batch": 12}), accumulated)  # 6 passes of <= 12
    for (_, a), (_, b) in zip(plain.reports, accumulated.reports, strict=True):
        _assert_close(a, b)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_k2_with_accumulation_stays_close_to_one_process(make_config) -> None:
    params = {"lr": 0.05, "batch_size": 64}
    single, parallel = RecordingReporter(), RecordingReporter()
    fit(make_config(params, epochs=2), single)
    fit(make_config(params, epochs=2, data_parallel=2, options={"max_micro_batch": 10}), parallel)  # 4 passes
    for (_, a), (_, b) in zip(single.reports, parallel.reports, strict=True):
        _assert_close(a, b)


def test_shards_partition_each_global_batch() -> None:
    batch = torch.arange(10, 21)  # 11 examples over 3 replicas: 4, 4, 3
    parts = [shard(batch, r, 3) for r in range(3)]
    assert [len(p) for p in parts] == [4, 4, 3]
    assert sorted(torch.cat(parts).tolist()) == batch.tolist()
    assert [len(p) for p in micro_batches(parts[0], 3)] == [3, 1]
    assert len(micro_batches(torch.arange(0), 4)) == 1  # an empty shard still takes part in the step
    with pytest.raises(ValueError, match="rank=3"):
        shard(batch, 3, 3)


def test_rank_devices_and_the_visible_device_convention(make_config) -> None:
    assert rank_devices(make_config(PARAMS, data_parallel=2)) == ()  # device="cpu": gloo
    leased = make_config(PARAMS, device="auto", devices=(2, 3, 5), data_parallel=2)
    assert rank_devices(leased) == (2, 3)
    with pytest.raises(ValueError, match="needs one device per rank"):
        rank_devices(make_config(PARAMS, device="auto", devices=(1,), data_parallel=2))
    # leased ids index the launcher's visible devices; each rank sees one, as cuda:0
    assert _visible_id(1, None) == "1"
    assert _visible_id(1, "4,6") == "6"
    assert _visible_id(0, "GPU-aaaa,GPU-bbbb") == "GPU-aaaa"
    with pytest.raises(ValueError, match="not in CUDA_VISIBLE_DEVICES"):
        _visible_id(2, "4,6")
