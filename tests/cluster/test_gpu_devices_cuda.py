"""On a CUDA GPU: the figures and the OOM recognition the CPU twins stand in for (marked ``gpu``)."""

from __future__ import annotations

import threading

import pytest
import torch

from cluster.device_figures import TrialMonitor, cuda_peak
from cluster.entrypoint import _use_leased_device, out_of_memory
from trainers.oom import is_out_of_memory

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_the_peak_is_cudas_max_memory_allocated_once_cuda_is_up() -> None:
    torch.cuda.init()
    monitor = TrialMonitor(devices=(0,), physical=(0,), tenants=lambda: 1).start()
    block = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda:0")
    figures = monitor.stop()
    assert figures["memory_kind"] == "cuda" and figures["peak_memory"] >= 256 * 2**20
    assert cuda_peak((0,)) == torch.cuda.max_memory_allocated(0)
    del block


def test_a_real_cuda_oom_is_recognised() -> None:
    total = torch.cuda.get_device_properties(0).total_memory
    with pytest.raises(torch.cuda.OutOfMemoryError) as caught:
        torch.empty(total * 2, dtype=torch.uint8, device="cuda:0")
    assert out_of_memory(caught.value) and is_out_of_memory(caught.value)


def test_the_lease_becomes_the_threads_current_device() -> None:
    last = torch.cuda.device_count() - 1
    seen: list[int] = []

    def trial() -> None:
        _use_leased_device((last,))
        seen.append(torch.cuda.current_device())

    thread = threading.Thread(target=trial)
    thread.start()
    thread.join(timeout=60)
    assert seen == [last]
