"""Trainers for the packed-GPU and out-of-memory campaigns on CPU (the CUDA twins of tests/search/test_gpu_*)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

import trainers.classifier_train as classifier  # the training half (torch), where _build lives
from trainers.api import Reporter, TrialConfig


def packed_fit(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    """Holds its lease for ``options.hold`` seconds, reporting; returns the device it was given."""
    hold = float(config.options.get("hold", 1.0))
    for step in range(1, 4):
        time.sleep(hold / 3)
        reporter.report(step, {"score": float(step)})
    visible = os.environ["CUDA_VISIBLE_DEVICES"]  # the trial's own process sees only its lease
    assert visible == config.visible_devices and config.devices == (0,), (visible, config.devices)
    return {"score": float(config.params["x"]), "device": float(visible), "pid": float(os.getpid())}


def visible_fit(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    """Says what a custom trainer sees (its ``CUDA_VISIBLE_DEVICES``, pid, ``devices``); reports every 0.1 s up to
    ``options.steps`` times, and returns early when asked to stop."""
    print(f"trial {config.number} sees CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}", flush=True)
    if config.options.get("fail"):
        raise ValueError(str(config.options["fail"]))
    step = 0
    for step in range(1, int(config.options.get("steps", 30)) + 1):
        time.sleep(0.1)
        reporter.report(step, {"score": float(step)})
        if reporter.should_stop():
            break
    return {
        "visible": float(os.environ["CUDA_VISIBLE_DEVICES"]),
        "pid": float(os.getpid()),
        "inside": float(config.devices[0]),
        "steps": float(step),
    }


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


def host_hog_fit(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    """Above ``options.hog_above`` width, grows its memory until the worker's nanny kills it; else a quick result."""
    if int(config.params["width"]) <= int(config.options["hog_above"]):
        time.sleep(0.5)
        return {"score": float(config.params["width"])}
    chunks = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        chunks.append(bytearray(32 * 2**20))  # 32 MiB, touched (bytearray zero-fills)
        time.sleep(0.1)
    raise AssertionError("the nanny should have killed this worker for memory")
