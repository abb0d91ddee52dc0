"""The processes of a chaos run: a campaign's controller started in its own process group, stopped or killed with
everything it left there, and its Dask workers killed while they run trials (:class:`WorkerKills`)."""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.chaos_study import PIDFILE, count_trials

__all__ = [
    "ROOT",
    "WorkerKills",
    "campaign_env",
    "group_alive",
    "kill_all",
    "process_group",
    "start_campaign",
    "stop_campaign",
]

ROOT = Path(__file__).resolve().parents[1]


def campaign_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def start_campaign(args: list[str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "search", *args, "--no-progress"],
            cwd=ROOT,
            env=campaign_env(),
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_group(pgid: int) -> list[tuple[int, int]]:
    """``(pid, parent pid)`` of every live (not zombie) process in process group ``pgid`` (Linux ``/proc``)."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # state ppid pgrp ... (after "pid (comm)")
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append((int(entry.name), int(fields[1])))
    return out


def stop_campaign(proc: subprocess.Popen, how: str = "KILL", grace: float = 60.0) -> dict[str, Any]:
    """Stop the controller, then SIGKILL whatever it left in its process group (workers, the sampler child).

    ``how="KILL"``: SIGKILL. ``how="TERM"``: SIGTERM, then up to ``grace`` s for the controller to exit on its
    own (then SIGKILL); says its exit status, how long it took and how many processes it left behind, and (after a
    SIGTERM only: a SIGKILLed controller leaves its workers, ended here) which of those were still there 2 s later
    (``stayed``; None after a SIGKILL, not looked at)."""
    sent = time.monotonic()
    try:
        os.kill(proc.pid, signal.SIGTERM if how == "TERM" else signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=grace if how == "TERM" else 30)
        returncode: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        returncode = None  # did not exit on its own
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    exited = time.monotonic() - sent
    left = [describe_process(pid) for pid, _parent in process_group(proc.pid)]  # alive when the controller had exited
    stayed: list[str] | None = None
    if how == "TERM":  # a controller that stopped on its own should have ended its workers: still there 2 s later?
        time.sleep(2.0 if left else 0.0)
        stayed = [describe_process(pid) for pid, _parent in process_group(proc.pid)]
    deadline = time.monotonic() + 30
    while group_alive(proc.pid) and time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    return {"signal": how, "returncode": returncode, "exit_s": exited, "left": left, "stayed": stayed}


def describe_process(pid: int) -> str:
    """``pid`` in a few words: what it runs (from its command line) and its thread count."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        threads = next(
            line.split()[1]
            for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            if line.startswith("Threads:")
        )
    except (OSError, StopIteration):
        return f"{pid} (gone)"
    kind = (
        "resource_tracker"
        if "resource_tracker" in cmdline
        else "spawned child"
        if "spawn_main" in cmdline
        else cmdline[:60]
    )
    return f"{pid} {kind}, {threads} threads"


def kill_all(proc: subprocess.Popen) -> None:
    """SIGKILL the controller, then whatever it left in its process group (workers, the sampler child)."""
    stop_campaign(proc, "KILL")


class WorkerKills:
    """SIGKILLs a Dask worker ``n`` times, after gaps of ``uniform(0, window)`` s of running time drawn from ``seed``.

    A worker here is a process of the controller's process group whose parent is the controller (the embedded
    cluster's nanny runs in it) and whose pid :func:`fit` wrote into a trial folder: it is running trials now.
    The controller's other children (its sampler child, multiprocessing's resource tracker) never run one."""

    def __init__(self, n: int, window: float, seed: int, folder: Path, say: Any) -> None:
        self.rng = random.Random(f"chaos-workers-{seed}")
        self.left, self.window, self.folder, self.say = n, window, folder, say
        self.live = 0.0  # seconds of running time (a controller up, its storage grown), all runs together
        self.due = self.rng.uniform(0.0, window) if n else float("inf")
        self.done: list[dict[str, Any]] = []

    def _running_on(self, proc: subprocess.Popen) -> dict[int, list[int]]:
        """Worker pid -> the trials whose pid file names it, for the controller's live children."""
        children = {pid for pid, parent in process_group(proc.pid) if parent == proc.pid}
        running: dict[int, list[int]] = collections.defaultdict(list)
        for pidfile in self.folder.glob(f"trials/*/{PIDFILE}"):
            try:
                pid = int(pidfile.read_text())
            except (OSError, ValueError):
                continue
            if pid in children:
                running[pid].append(int(pidfile.parent.name))
        return running

    def tick(self, proc: subprocess.Popen, seconds: float, run: int) -> None:
        """``seconds`` more of running time under controller ``proc`` (its ``run``-th start); kill if one is due."""
        if self.left <= 0:
            return
        self.live += seconds
        if self.live < self.due or proc.poll() is not None:
            return
        running = self._running_on(proc)
        if not running:
            return  # no worker runs a trial yet: at the next tick
        pid = self.rng.choice(sorted(running))
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        kill = {
            "at": self.live,
            "pid": pid,
            "run": run,
            "running": sorted(running[pid]),
            "trials": count_trials(self.folder),
        }
        self.done.append(kill)
        self.left -= 1
        self.due = self.live + self.rng.uniform(0.0, self.window)
        self.say(
            f"worker kill {len(self.done)}: pid {pid} (trial(s) {kill['running']}), "
            f"{kill['trials']} trial(s) in the storage"
        )
