"""The trial monitor's memory figures: the process tree's RSS from /proc, one sampling thread for all trials."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import psutil
import pytest

import cluster.device_figures as device_figures
from cluster.device_figures import TrialMonitor, _proc_children_readable, _Ticker, rss_bytes


def _psutil_tree_rss() -> int:
    me = psutil.Process()
    return me.memory_info().rss + sum(child.memory_info().rss for child in me.children(recursive=True))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_rss_of_the_process_tree_from_proc_matches_psutil_with_grandchildren() -> None:
    assert _proc_children_readable()
    # a child that starts a grandchild: both are counted, as psutil's recursive children are
    script = "import subprocess, time; p = subprocess.Popen(['sleep', '30']); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 20
        while len(psutil.Process().children(recursive=True)) < 2:
            assert time.monotonic() < deadline, "the grandchild did not start"
            time.sleep(0.05)
        ours, theirs = rss_bytes(), _psutil_tree_rss()
        assert abs(ours - theirs) <= 0.02 * theirs  # the same processes; pages may move between the two reads
        assert ours > psutil.Process().memory_info().rss + 5 * 2**20  # the children's memory is in it
    finally:
        for proc in psutil.Process(child.pid).children(recursive=True):
            proc.kill()
        child.kill()
        child.wait(timeout=10)


def _monitor_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "hypersweep-trial-monitor"]


def test_concurrent_trials_share_one_sampling_thread_and_stop_sampling_when_they_end() -> None:
    sent: dict[int, list[int]] = {i: [] for i in range(6)}
    monitors = [TrialMonitor(on_memory=sent[i].append, every=0.02).start() for i in range(6)]
    assert not any(sent.values())  # the start sample sends nothing (the outcome carries the peak)
    deadline = time.monotonic() + 20
    while not all(sent.values()):  # the first figure comes with the first tick
        assert time.monotonic() < deadline, f"not every monitor sent its first figure: {sent}"
        time.sleep(0.02)
    grow = max(48 * 2**20, rss_bytes() // 4)  # a quarter of what the process holds: more than the tenth that is sent
    hoard = bytearray(grow)
    hoard[::4096] = b"x" * len(hoard[::4096])
    deadline = time.monotonic() + 20
    while any(len(s) < 2 for s in sent.values()):
        assert time.monotonic() < deadline, f"not every monitor sampled the growth: {sent}"
        time.sleep(0.02)
    assert len(_monitor_threads()) == 1  # six trials, one thread
    figures = [m.stop() for m in monitors]
    counts = [len(s) for s in sent.values()]
    time.sleep(0.2)  # ten sampling periods: a stopped monitor is never sampled again
    assert [len(s) for s in sent.values()] == counts
    assert all(f["peak_memory"] >= grow and f["memory_kind"] == "rss" for f in figures)
    del hoard


class _Counted:
    """Stands in for a monitor on a ticker of its own: when it was sampled."""

    def __init__(self, every: float) -> None:
        self.every = every
        self.ticks: list[float] = []

    def tick(self) -> None:
        self.ticks.append(time.monotonic())


def test_a_monitor_due_sooner_than_the_ticker_wakes_is_still_sampled_on_time() -> None:
    ticker = _Ticker()
    slow, fast = _Counted(every=30.0), _Counted(every=0.05)
    ticker.add(slow)  # the thread now sleeps until slow is due, 30 s away
    time.sleep(0.1)
    added = time.monotonic()
    ticker.add(fast)  # due sooner: it wakes the thread
    deadline = added + 10
    while len(fast.ticks) < 3:
        assert time.monotonic() < deadline, fast.ticks
        time.sleep(0.02)
    assert fast.ticks[0] - added < 2.0 and not slow.ticks
    ticker.remove(fast)
    ticker.remove(slow)


def test_a_figure_measured_just_now_serves_a_trial_that_starts_right_after() -> None:
    first = rss_bytes()
    hoard = bytearray(64 * 2**20)
    hoard[::4096] = b"x" * len(hoard[::4096])
    assert rss_bytes(within=30.0) == first  # the figure a trial just ended with
    assert rss_bytes() >= first + 60 * 2**20  # a fresh one sees the growth
    del hoard


GROWER = """
import subprocess, sys, time
sys.stdin.readline()
hoard = bytearray(64 * 2**20); hoard[::4096] = b"x" * len(hoard[::4096])
print("grown", flush=True)
sys.stdin.readline()
child = subprocess.Popen([sys.executable, "-c", "b = bytearray(32 * 2**20); b[::4096] = b'x' * len(b[::4096]); import time; time.sleep(60)"])
time.sleep(60)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_a_walk_that_found_no_child_stands_briefly_and_a_child_is_counted_by_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    walks: list[int] = []
    original = device_figures._proc_tree
    monkeypatch.setattr(device_figures, "_proc_tree", lambda pid: walks.append(pid) or original(pid))
    monkeypatch.setattr(device_figures, "TREE_REUSE", 30.0)
    monkeypatch.setattr(device_figures, "_last_walk", (0, float("-inf"), True))
    proc = subprocess.Popen([sys.executable, "-c", GROWER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        first = rss_bytes(proc.pid)
        assert walks == [proc.pid]  # a walk: it had no child
        proc.stdin.write("grow\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "grown"
        assert rss_bytes(proc.pid) >= first + 60 * 2**20  # its own statm, read afresh: the growth is there
        assert len(walks) == 1  # no walk: the last found no child, just now
        proc.stdin.write("spawn\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 20
        while not psutil.Process(proc.pid).children():
            assert time.monotonic() < deadline, "the child did not start"
            time.sleep(0.05)
        time.sleep(0.5)  # its memory in place
        monkeypatch.setattr(device_figures, "TREE_REUSE", 0.0)  # the last walk is too old now
        own = psutil.Process(proc.pid).memory_info().rss
        assert rss_bytes(proc.pid) >= own + 20 * 2**20 and len(walks) == 2  # walked: the child's memory is in it
        monkeypatch.setattr(device_figures, "TREE_REUSE", 30.0)
        rss_bytes(proc.pid)
        assert len(walks) == 3  # the last walk found a child: walked again, however recent
    finally:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait(timeout=10)
