"""Device leases in shares (``gpus = 1/k``), memory-aware placement, and recognising out-of-memory."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from cluster.device_figures import TrialMonitor
from cluster.entrypoint import out_of_memory
from cluster.executor import host_out_of_memory
from cluster.packing import GpuPacking, MemoryModel
from cluster.resources import DevicePool, Lease, LeaseError

GiB = 2**30


def test_quarter_shares_put_four_trials_on_each_device_spread_before_packed() -> None:
    pool = DevicePool([0, 1])
    leases = [pool.take(0.25) for _ in range(8)]
    assert [lease.ids[0] for lease in leases[:2]] == [0, 1]  # spread first
    assert pool.tenants() == {0: 4, 1: 4}
    with pytest.raises(LeaseError, match="a 0.25 share of one device"):
        pool.take(0.25)
    pool.give(leases[0])
    assert pool.take(0.25).ids == leases[0].ids


def test_whole_devices_need_devices_with_no_tenant() -> None:
    pool = DevicePool([0, 1, 2])
    part = pool.take(0.5)
    assert pool.lease(2) == (1, 2)
    with pytest.raises(LeaseError):
        pool.lease(1)
    pool.give(part)
    assert pool.lease(1) == (0,)


def test_an_integer_share_takes_that_many_whole_devices_per_slot() -> None:
    pool = DevicePool([0, 1, 2, 3])
    assert pool.take(2.0, width=1).ids == (0, 1)
    assert pool.take(1.0, width=2).ids == (2, 3)


def test_memory_places_a_trial_where_its_expected_memory_fits_under_the_headroom() -> None:
    pool = DevicePool([0, 1], capacity={0: 80 * GiB, 1: 80 * GiB}, headroom=0.9)
    big = pool.take(0.25, memory=50 * GiB)
    other = pool.take(0.25, memory=50 * GiB)
    assert {big.ids, other.ids} == {(0,), (1,)}  # 100 GiB would not fit on one 80 GiB device at 0.9
    small = pool.take(0.25, memory=10 * GiB)
    assert pool.tenants()[small.ids[0]] == 2  # 60 GiB of 72 allowed
    # 50 + 10 + 20 > 72 on one, 50 + 20 = 70 <= 72 on the other: it goes there
    assert pool.take(0.25, memory=20 * GiB).ids != small.ids


def test_a_trial_waits_for_memory_then_gets_the_device_that_freed() -> None:
    pool = DevicePool([0], capacity={0: 80 * GiB})
    first = pool.take(0.5, memory=60 * GiB)
    got: list[Lease] = []
    waiter = threading.Thread(target=lambda: got.append(pool.take(0.5, memory=60 * GiB, wait=30)))
    waiter.start()
    time.sleep(0.3)
    assert not got  # 120 GiB would not fit: it waits
    pool.give(first)
    waiter.join(timeout=10)
    assert got and got[0].ids == (0,)


def test_a_wait_that_runs_out_takes_the_least_loaded_device_anyway() -> None:
    pool = DevicePool([0], capacity={0: 10 * GiB})
    pool.take(0.5, memory=8 * GiB)
    assert pool.take(0.5, memory=8 * GiB, wait=0.1).ids == (0,)  # it may run out of memory: that is recorded


@pytest.mark.parametrize("gpus", [0.3, 1.5, 0.0, -1.0])
def test_packing_refuses_shares_that_do_not_fill_a_gpu(gpus: float) -> None:
    with pytest.raises(ValueError, match=f"gpus={gpus!r}"):
        GpuPacking(gpus)


def test_packing_says_how_many_trials_a_gpu_holds() -> None:
    assert GpuPacking(0.25).trials_per_gpu == 4 and GpuPacking(2.0).trials_per_gpu == 1


def test_the_memory_model_estimates_from_the_nearest_configurations() -> None:
    model = MemoryModel(neighbours=2, margin=1.0)
    assert model.estimate({"batch_size": 64}) == 0  # nothing known yet
    model.observe({"batch_size": 64, "model": "mlp"}, 4 * GiB)
    model.observe({"batch_size": 256, "model": "mlp"}, 16 * GiB)
    model.observe({"batch_size": 64, "model": "cnn"}, 9 * GiB)
    assert model.estimate({"batch_size": 64, "model": "mlp"}) == 4 * GiB  # the exact match alone
    assert model.estimate({"batch_size": 128, "model": "mlp"}) == 16 * GiB  # the larger of its two neighbours
    assert MemoryModel(margin=1.2).estimate({}) == 0


def test_out_of_memory_is_recognised_by_kind_and_through_a_ranks_traceback() -> None:
    assert out_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert out_of_memory(MemoryError())
    wrapped = RuntimeError("rank 1 failed")
    wrapped.traceback = "Traceback ...\ntorch.OutOfMemoryError: CUDA out of memory."  # type: ignore[attr-defined]
    assert out_of_memory(wrapped)
    try:
        try:
            raise torch.cuda.OutOfMemoryError("inner")
        except torch.cuda.OutOfMemoryError as exc:
            raise ValueError("outer") from exc
    except ValueError as exc:
        assert out_of_memory(exc)
    assert not out_of_memory(ValueError("lr must be > 0"))


def test_a_lost_worker_ran_out_of_memory_when_its_trial_held_most_of_the_limit() -> None:
    assert host_out_of_memory("KilledWorker: ...", memory=900 * 2**20, limit=1000 * 2**20)
    assert not host_out_of_memory("KilledWorker: ...", memory=100 * 2**20, limit=1000 * 2**20)
    assert host_out_of_memory("Worker exceeded 95% memory budget. Restarting", memory=0, limit=0)
    assert not host_out_of_memory("study memory-sweep: worker died", memory=0, limit=0)  # a name, not a cause


def test_the_monitor_measures_the_hosts_memory_without_cuda() -> None:
    sent: list[int] = []
    monitor = TrialMonitor(on_memory=sent.append, every=0.05).start()
    hoard = bytearray(64 * 2**20)
    time.sleep(0.3)
    figures = monitor.stop()
    assert figures["memory_kind"] == "rss" and figures["peak_memory"] >= 64 * 2**20
    assert sent and sent[-1] <= figures["peak_memory"]
    assert "gpu_utilization" not in figures
    del hoard
