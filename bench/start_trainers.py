"""The trainers bench/trial_start.py and bench/gpu_check.py time (a module of its own: a warm pool's server imports
what a trainer's module imports, and these import only torch and the rank helpers)."""

from __future__ import annotations

import os
import time
from typing import Any


def first_step_fit(config: Any, reporter: Any) -> dict[str, float]:
    """Its first line's time, then one SGD step of a small model (torch imported here, as a trainer does)."""
    entered = time.time()
    import torch

    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.ones(8, 16)).pow(2).mean()
    loss.backward()
    optimizer.step()
    return {"entered": entered, "first_step": time.time(), "parent": float(os.getppid())}


def packed_torch_fit(config: Any, reporter: Any) -> dict[str, float]:
    """The packing campaign's lease holder (``tests/search/gpu_trainers.py:packed_fit``) as a torch trainer: one SGD
    step first (torch imported inside, as the built-in trainers do), then it holds its lease ``options.hold`` s."""
    import torch

    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(8, 16)).pow(2).mean().backward()
    optimizer.step()
    hold = float(config.options.get("hold", 1.0))
    for step in range(1, 4):
        time.sleep(hold / 3)
        reporter.report(step, {"score": float(step)})
    visible = os.environ["CUDA_VISIBLE_DEVICES"]
    return {"score": float(config.params["x"]), "device": float(visible), "pid": float(os.getpid())}


def cuda_first_step_fit(config: Any, reporter: Any) -> dict[str, float]:
    """:func:`first_step_fit` on ``cuda:0`` (the trial's lease), with this process's own CUDA memory peak."""
    entered = time.time()
    import torch

    device = torch.device("cuda", 0)
    model = torch.nn.Linear(1024, 1024).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(256, 1024, device=device)).pow(2).mean().backward()
    optimizer.step()
    torch.cuda.synchronize()
    peak = float(torch.cuda.max_memory_allocated())
    return {"entered": entered, "first_step": time.time(), "peak": peak, "parent": float(os.getppid())}


def gloo_fit(config: Any, reporter: Any) -> dict[str, float]:
    """A rank: its first line, its process group up (gloo rendezvous), one data-parallel SGD step (its gradients
    summed over the ranks); every rank returns the later rank's times (the trial waits for both)."""
    entered = time.time()
    import torch
    import torch.distributed as dist

    from trainers.ddp_rank import process_group

    imported = time.time()
    with process_group(torch.device("cpu")):
        joined = time.time()
        model = torch.nn.Linear(16, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.ones(8, 16)).pow(2).mean().backward()
        for parameter in model.parameters():
            dist.all_reduce(parameter.grad)
        optimizer.step()
        stamps = torch.tensor([entered, imported, joined, time.time()], dtype=torch.float64)
        dist.all_reduce(stamps, op=dist.ReduceOp.MAX)
    keys = ("entered", "imported", "joined", "first_step")
    return {key: float(value) for key, value in zip(keys, stamps.tolist(), strict=True)}
