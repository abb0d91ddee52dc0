"""The built-in classifier on a CPU "device" that runs out of memory above a batch size: the CPU twin of a CUDA OOM
(tests/search/loop/test_oom_campaign.py, tests/trainers/test_oom_retry.py). Imports torch, so it is kept apart from
the torch-free lease holders in gpu_trainers.py."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

import trainers.classifier_train as classifier  # the training half (torch), where _build lives
from trainers.api import Reporter, TrialConfig


class _OomAbove(nn.Module):
    """``inner``, but a training pass over more than ``limit`` examples raises CUDA's out-of-memory error."""

    def __init__(self, inner: nn.Module, limit: int) -> None:
        super().__init__()
        self.inner = inner
        self.limit = limit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and x.shape[0] > self.limit:
            raise torch.cuda.OutOfMemoryError(
                f"CUDA out of memory (injected): a pass of {x.shape[0]} examples, more than {self.limit} fit"
            )
        return self.inner(x)


@contextmanager
def _injected(limit: int) -> Iterator[None]:
    build = classifier._build

    def build_then_wrap(*args: Any) -> nn.Module:
        return _OomAbove(build(*args), limit)

    classifier._build = build_then_wrap  # one trial per worker process at a time (1 slot each)
    try:
        yield
    finally:
        classifier._build = build


def oom_above_fit(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    """The built-in classifier, on a "device" holding at most ``options.oom_above`` examples per pass."""
    limit = int(config.options["oom_above"])
    options = {k: v for k, v in config.options.items() if k != "oom_above"}
    with _injected(limit):
        return classifier.run(TrialConfig.from_dict({**config.to_dict(), "options": options}), reporter)
