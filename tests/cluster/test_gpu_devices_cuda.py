"""On a CUDA GPU: the figures and the OOM recognition the CPU twins stand in for (marked ``gpu``)."""

from __future__ import annotations

import pytest
import torch

from cluster.device_figures import TrialMonitor, cuda_peak
from cluster.entrypoint import out_of_memory
from trainers.api import RecordingReporter, TrialConfig
from trainers.ddp import launch_solo
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


def sees_one_gpu(config: TrialConfig, reporter: RecordingReporter) -> dict[str, float]:
    """A trial's own process: one visible GPU, cuda:0, and a CUDA peak that comes back with the report."""
    block = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")
    reporter.report(1, {"count": float(torch.cuda.device_count())})
    del block
    return {"count": float(torch.cuda.device_count()), "current": float(torch.cuda.current_device())}


def test_a_trial_in_its_own_process_sees_only_its_lease_as_cuda_0() -> None:
    last = torch.cuda.device_count() - 1
    peaks: list[int] = []
    config = TrialConfig("cuda", 0, {}, seed=0, epochs=1, devices=(0,), visible_devices=str(last))
    metrics = launch_solo(sees_one_gpu, config, RecordingReporter(), str(last), on_memory=peaks.append)
    assert metrics == {"count": 1.0, "current": 0.0}
    assert peaks and max(peaks) >= 64 * 2**20
