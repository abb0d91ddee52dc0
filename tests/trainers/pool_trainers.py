"""Trainers for the warm pool's tests (tests/trainers/test_warm_pool.py): each says what its process saw."""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from pathlib import Path

import numpy
import torch

from trainers.api import Reporter, TrialConfig

SHARED = ("CUDA_VISIBLE_DEVICES", "HYPERSWEEP_DDP_DIR", "HYPERSWEEP_DDP_PARENT", "HYPERSWEEP_DDP_FD")


def where_fit(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    """Writes its environment, ``sys.path``, working directory, argv and process group to ``options.out``."""
    record = {
        "env": {k: v for k, v in os.environ.items() if k not in SHARED},
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "sys_path": sys.path,
        "cwd": os.getcwd(),
        "argv0": sys.argv[0],
        "main": sys.modules["__main__"].__spec__.name,  # type: ignore[union-attr]
        "own_group": os.getpgid(0) == os.getpid(),
        "cuda_initialized": torch.cuda.is_initialized(),
        "open_files": _open_files(),
    }
    Path(str(config.options["out"])).write_text(json.dumps(record))
    return {"parent": float(os.getppid()), "pid": float(os.getpid())}


def _open_files() -> list[str]:
    """What this process's file descriptors are open on (a socket, a pipe, a path), less the numbers."""
    kinds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            kinds.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}").split(":[")[0]))  # less the launch folder
        except OSError:
            continue  # the listing's own descriptor, closed already
    return sorted(kinds)


def torch_fit(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    """A few SGD steps of a seeded linear model, and draws from torch's, numpy's and Python's unseeded generators."""
    dynamo = float("torch._dynamo" in sys.modules)  # which the first optimizer imports: preloaded in the pool
    unseeded = [float(torch.rand(1).item()), float(numpy.random.rand()), random.random()]
    generator = torch.Generator().manual_seed(config.seed)
    x = torch.randn(64, 8, generator=generator)
    y = x @ torch.randn(8, 1, generator=generator)
    torch.manual_seed(config.seed)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(1, 6):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        reporter.report(step, {"loss": float(loss)})
    return {
        "loss": float(loss),
        "parent": float(os.getppid()),
        "dynamo": dynamo,
        **{f"unseeded{i}": u for i, u in enumerate(unseeded)},
    }


def crash_fit(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    """Fails as ``options.how`` says: an error, a CUDA out-of-memory error, SIGKILL, or ``os._exit(3)``."""
    how = str(config.options["how"])
    if how == "oom":
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (raised on the CPU)")
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "exit":
        os._exit(3)
    raise ValueError("boom")


def sleep_fit(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    time.sleep(600)
    return {}


def rank_killed_fit(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    """Rank 1 dies by SIGKILL; rank 0 waits for it at the rendezvous (until its launcher kills it)."""
    if os.environ["RANK"] == "1":
        os.kill(os.getpid(), signal.SIGKILL)
    from trainers.ddp_rank import process_group

    with process_group(torch.device("cpu")):
        return {"parent": float(os.getppid())}
