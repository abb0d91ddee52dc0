"""Which project modules one trial crosses at run time, and which pairs call each other both ways.

    python -m bench.trace_trial [--trials 1]

Runs a real :class:`search.loop.campaign.Campaign` (real Optuna study in the campaign folder)
on a :class:`cluster.simulated.SimulatedExecutor` for one trial of three epochs, under
``sys.setprofile``. Every Python call whose caller and callee sit in two different
project modules (``search``, ``spaces``, ``trainers``, ``cluster``) is an edge. Printed: the modules
crossed while the campaign ran, the edges, and the *two-way* pairs (A calls B and B calls A: a
callback or closure handed into a module, or modules that lean on each other). Set-up (parsing the
spec, opening the study) is not traced; only ``Campaign(...)`` and ``run()``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import Any

from bench.simulate import bench_spec
from cluster.simulated import CurveModel, SimulatedExecutor
from search.loop.campaign import Campaign
from search.session.runner import load_study
from search.store.folder import CampaignFolder

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("search", "spaces", "trainers", "cluster")

__all__ = ["trace_campaign", "two_way_pairs", "main"]


def _module_of(filename: str, cache: dict[str, str | None]) -> str | None:
    """``search/loop/campaign.py`` -> ``search.loop.campaign``; None outside the project packages."""
    if filename not in cache:
        path = Path(filename)
        try:
            rel = path.resolve().relative_to(ROOT)
        except ValueError:
            rel = None
        if rel is None or rel.parts[0] not in PACKAGES or rel.suffix != ".py":
            cache[filename] = None
        else:
            parts = list(rel.with_suffix("").parts)
            cache[filename] = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return cache[filename]


def trace_campaign(n_trials: int = 1) -> tuple[set[str], dict[tuple[str, str], int]]:
    """(modules crossed, {(caller module, callee module): calls}) for one simulated campaign."""
    space = {"lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True}}
    spec = bench_spec("trace", space, "random", n_trials, epochs=3, options={})
    cache: dict[str, str | None] = {}
    modules: set[str] = set()
    edges: dict[tuple[str, str], int] = {}

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        callee = _module_of(frame.f_code.co_filename, cache)
        if callee is None:
            return
        modules.add(callee)
        caller_frame = frame.f_back
        while caller_frame is not None and _module_of(caller_frame.f_code.co_filename, cache) is None:
            caller_frame = caller_frame.f_back  # through stdlib/optuna frames to the nearest project frame
        caller = _module_of(caller_frame.f_code.co_filename, cache) if caller_frame is not None else None
        if caller is not None and caller != callee:
            edges[(caller, callee)] = edges.get((caller, callee), 0) + 1

    with tempfile.TemporaryDirectory() as tmp:
        folder = CampaignFolder(Path(tmp) / "trace")
        folder.create(spec.text)
        study = load_study(spec, folder, create=True)
        executor = SimulatedExecutor(1, CurveModel(seed=0, epoch_seconds=1.0), controller_time_scale=0)
        sys.setprofile(profile)
        try:
            Campaign(spec, folder, study, executor, clock=executor.clock).run()
        finally:
            sys.setprofile(None)
    return modules, edges


def two_way_pairs(edges: Mapping[tuple[str, str], int]) -> list[tuple[str, str]]:
    return sorted({tuple(sorted(pair)) for pair in edges if pair[::-1] in edges})  # type: ignore[misc]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1)
    args = parser.parse_args(argv)
    modules, edges = trace_campaign(args.trials)
    pairs = two_way_pairs(edges)
    print(f"modules crossed: {len(modules)}")
    for name in sorted(modules):
        print(f"  {name}")
    print(f"module edges (caller -> callee, calls): {len(edges)}")
    for (a, b), calls in sorted(edges.items()):
        print(f"  {a} -> {b}  {calls}")
    print(f"two-way module pairs: {len(pairs)}")
    for a, b in pairs:
        print(f"  {a} <-> {b}  ({edges[(a, b)]} / {edges[(b, a)]} calls)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
