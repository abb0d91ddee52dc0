"""Torch-free trainers for the packed-GPU campaigns on CPU (the CUDA twins of tests/search/test_gpu_*);
the CUDA out-of-memory twin is in oom_trainers.py."""

from __future__ import annotations

import os
import sys
import time

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
        "torch_imported": float("torch" in sys.modules),  # nothing here uses it: the process should not load it
        "parent": float(os.getppid()),  # the worker, or the server of its warm pool
    }
