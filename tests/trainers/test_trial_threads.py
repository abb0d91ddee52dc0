"""A trial's result does not depend on the thread count its process inherits (cores, ``OMP_NUM_THREADS``).

torch's CPU reductions and matrix products are blocked by the intra-op thread count (1 and 2 threads give
different losses from the first epoch on), so the built-in trainer sets it from its config
(``options.torch_threads``, default 1) instead of inheriting the worker's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch

from trainers.api import RecordingReporter
from trainers.classifier import fit

Strip = Callable[[dict[str, float]], dict[str, float]]
# SGD with momentum and the noise scale measured, as the scaling examples train
PARAMS = {"hidden": 64, "optimizer": "sgd", "momentum": 0.9, "lr": 0.3, "batch_size": 32, "schedule": "constant"}


@pytest.fixture
def process_threads() -> Iterator[Callable[[int], None]]:
    """Set the process's intra-op thread count (as a worker inherits it from its cores), restored afterwards."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


def _history(reporter: RecordingReporter, strip: Strip) -> list[tuple[int, dict[str, float]]]:
    return [(step, strip(m)) for step, m in reporter.reports]


@pytest.mark.slow
def test_process_thread_setting_does_not_change_a_trial(make_config, without_timing: Strip, process_threads) -> None:
    config = make_config(PARAMS, epochs=3, options={"noise_scale_every": 4})
    runs = []
    for threads in (1, 2):
        process_threads(threads)
        reporter = RecordingReporter()
        fit(config, reporter)
        runs.append(_history(reporter, without_timing))
    assert runs[0] == runs[1]
