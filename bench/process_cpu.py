"""CPU seconds of each process of one small campaign: ``python -m bench.process_cpu [--trials 2] [--epochs 1]``.

Runs ``hypersweep run examples/digits.toml --workers 2`` (the trial count and epochs cut) in a child process, or
with ``--in-process N`` N campaigns by ``search.run`` in this process (as the tests do), and polls the process tree every 20 ms (psutil), keeping each process's last user + system CPU seconds seen before
it exits (a process's last < 20 ms are not seen). Prints one line per process role and the total. CPU seconds do not
depend on the machine's load as wall times do. ``--spawn``: a child spawned from pip's ``hypersweep`` script,
running the script again (as before ``search.spawned``) and skipping it.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]


def _role(cmdline: list[str]) -> str:
    text = " ".join(cmdline)
    for needle, role in (
        ("hypersweep run", "controller (+ scheduler, nannies)"),
        ("warm_server", "warm-pool server"),
        ("trainers", "trial process"),
        ("spawn_main", "spawned (2 Dask workers, then the sampler child: ~0.3 s)"),
    ):
        if needle in text:
            return role
    return text[:80]


def _spec(trials: int, epochs: int, folder: Path) -> Path:
    text = (ROOT / "examples" / "digits.toml").read_text()
    text = text.replace("n_trials = 16", f"n_trials = {trials}").replace("epochs = 10", f"epochs = {epochs}")
    path = folder / "digits.toml"
    path.write_text(text)
    return path


def _poll(root: psutil.Process, seen: dict[int, tuple[str, float]], done: Callable[[], bool]) -> None:
    """Each process's last CPU seconds under ``root`` (itself excluded when ``root`` is this process) until done."""
    while not done():
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        for proc in tree:
            if proc.pid == os.getpid():
                continue
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    role = _role(proc.cmdline())  # again each time: a child forked, not yet exec'd, looks like us
            except psutil.Error:
                continue
            seen[proc.pid] = (role, times.user + times.system)
        time.sleep(0.02)


def measure(trials: int, epochs: int, workers: int) -> dict[int, tuple[str, float]]:
    """Each process's (role, CPU seconds) of one campaign run by ``hypersweep run``, by pid."""
    seen: dict[int, tuple[str, float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        spec = _spec(trials, epochs, Path(folder))
        command = ["hypersweep", "run", str(spec), "--workers", str(workers), "--no-progress"]
        child = subprocess.Popen([*command, "--runs-dir", folder], cwd=ROOT, stdout=subprocess.DEVNULL)
        _poll(psutil.Process(child.pid), seen, lambda: child.poll() is not None)
    return seen


def measure_in_process(trials: int, epochs: int, workers: int, runs: int) -> dict[int, tuple[str, float]]:
    """As a test does: ``runs`` campaigns by ``search.run`` in this process; the controller's CPU seconds are those
    of the last campaign alone (its imports were paid by the first), the other processes' those of every run."""
    import search

    seen: dict[int, tuple[str, float]] = {}
    for run in range(runs):
        with tempfile.TemporaryDirectory() as folder:
            spec = _spec(trials, epochs, Path(folder))
            finished = threading.Event()
            poller = threading.Thread(target=_poll, args=(psutil.Process(), seen, finished.is_set))
            poller.start()
            before = time.process_time()
            try:
                search.run(spec, runs_dir=folder, n_workers=workers, progress=False)
            finally:
                finished.set()
                poller.join()
            seen[-run - 1] = (f"controller (this process, run {run})", time.process_time() - before)
    return seen


SCRIPT = """import sys
from search.cli import main  # as pip's hypersweep script
from search.spawned import spawn_as_module

if __name__ == "__main__":
    import multiprocessing

    from bench.process_cpu import spawned_cpu

    if sys.argv[1] == "skip":
        spawn_as_module(main)
    context = multiprocessing.get_context("spawn")
    seconds = []
    for _ in range(4):
        queue = context.Queue()
        child = context.Process(target=spawned_cpu, args=(queue,))
        child.start()
        seconds.append(queue.get(timeout=120))
        child.join()
    print(sys.argv[1], " ".join(f"{s:.3f}" for s in seconds))
"""


def spawned_cpu(queue: Any) -> None:
    """In a spawned child: import ``distributed`` (as a worker does) and put this process's CPU seconds."""
    import resource

    import distributed  # noqa: F401

    usage = resource.getrusage(resource.RUSAGE_SELF)
    queue.put(usage.ru_utime + usage.ru_stime)


def spawn_cost() -> None:
    """A child spawned from pip's ``hypersweep`` script, 4 times: running the script again, and skipping it."""
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "hypersweep"
        script.write_text(SCRIPT)
        for way in ("again", "skip"):
            subprocess.run([sys.executable, str(script), way], cwd=ROOT, check=True, timeout=600)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--in-process", type=int, default=0, metavar="RUNS", help="RUNS campaigns by search.run here")
    parser.add_argument("--spawn", action="store_true", help="only a spawned child's CPU, the script run again or not")
    args = parser.parse_args(argv)
    if args.spawn:
        spawn_cost()
        return 0
    if args.in_process:
        seen = measure_in_process(args.trials, args.epochs, args.workers, args.in_process)
    else:
        seen = measure(args.trials, args.epochs, args.workers)
    by_role: dict[str, list[float]] = collections.defaultdict(list)
    for role, seconds in seen.values():
        by_role[role].append(seconds)
    for role, values in sorted(by_role.items()):
        print(f"{role:60s} n={len(values)}  cpu={sum(values):6.2f} s  each: {' '.join(f'{v:.2f}' for v in values)}")
    print(f"{'total':60s}        cpu={sum(s for _, s in seen.values()):6.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
