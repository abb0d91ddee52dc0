"""The controller's way out (cluster.way_out): each wait bounded by what is left of one deadline and named when it
runs out, and after a Ctrl-C a watchdog that ends the process (and its children) at the bound whatever holds it.
Real event loops, threads and processes; the end-to-end case is tests/search/loop/test_hung_scheduler.py."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from cluster import way_out

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_way_out_left_behind() -> Iterator[None]:
    yield
    way_out.end()  # this process goes on: no deadline for the next test


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop on a thread of its own, as a Dask client's (the ``asyncio_loop`` its IOLoop carries)."""
    running = asyncio.new_event_loop()
    thread = threading.Thread(target=running.run_forever, daemon=True)
    thread.start()
    yield running
    running.call_soon_threadsafe(running.stop)
    thread.join(timeout=10)
    running.close()


class IOLoop:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.asyncio_loop = loop


def test_a_call_that_never_ends_is_left_at_its_cap_with_a_line_saying_what_it_waited_for(
    loop: asyncio.AbstractEventLoop, capfd: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    ended = way_out.on_loop(IOLoop(loop), lambda: asyncio.Event().wait(), 0.5, "the scheduler did not answer")
    took = time.monotonic() - started
    assert not ended
    assert 0.4 <= took < 5
    assert capfd.readouterr().err == "hypersweep: the scheduler did not answer within 0.5 s; leaving it\n"


def test_a_call_that_ends_in_time_says_nothing_and_an_error_is_not_raised(
    loop: asyncio.AbstractEventLoop, capfd: pytest.CaptureFixture[str]
) -> None:
    done: list[int] = []
    assert way_out.on_loop(IOLoop(loop), lambda: done.append(1), 5, "x")
    assert done == [1]

    def fails() -> None:
        raise ValueError("Client is closed")

    assert not way_out.on_loop(IOLoop(loop), fails, 5, "x")
    closed = asyncio.new_event_loop()
    closed.close()
    assert not way_out.on_loop(IOLoop(closed), lambda: None, 5, "x")  # a loop already closed: nothing awaited
    assert capfd.readouterr().err == ""


def test_once_the_way_out_began_every_wait_takes_at_most_what_is_left_of_its_bound(
    loop: asyncio.AbstractEventLoop, capfd: pytest.CaptureFixture[str]
) -> None:
    assert way_out.left(30) == 30  # no way out under way: a wait's own cap
    way_out.begin(seconds=1.0)
    way_out.begin(seconds=100.0)  # it began already: its deadline stays
    assert way_out.left(30) <= 1.0
    started = time.monotonic()
    for _ in range(3):  # three waits stuck at once: together within the one bound, not three times their cap
        way_out.on_loop(IOLoop(loop), lambda: asyncio.Event().wait(), 5, "stuck")
    stuck = threading.Thread(target=time.sleep, args=(30,), daemon=True)
    stuck.start()
    assert not way_out.joined(stuck, 20, "the stuck thread did not end")
    assert time.monotonic() - started < 1.0 + 3 * 1.0 + 2  # each past the deadline gives up at once
    assert "hypersweep: the stuck thread did not end within 0 s; leaving it" in capfd.readouterr().err
    way_out.end()  # a campaign's next round: no way out under way any more
    assert way_out.left(30) == 30


def test_a_close_that_times_out_is_said_not_raised(capfd: pytest.CaptureFixture[str]) -> None:
    class Hung:
        def close(self, timeout: float) -> None:
            raise TimeoutError(f"timed out after {timeout} s.")

    way_out.close_within(Hung(), 10, "the Dask client did not close")
    assert capfd.readouterr().err == "hypersweep: the Dask client did not close within 10 s; going on\n"


WATCHED = """
import subprocess, sys, time
from cluster import way_out

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(child.pid, flush=True)
way_out.last_words("interrupted; continue with 'hypersweep resume runs/x'")
way_out.begin(130, seconds=1.0)
time.sleep(120)  # a wait no one bounded
"""


@pytest.mark.timeout(60)
def test_the_watchdog_ends_a_process_held_past_the_bound_with_its_status_and_kills_its_children() -> None:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", WATCHED],
        capture_output=True,
        text=True,
        timeout=45,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 130, proc.stderr
    assert time.monotonic() - started < 30  # at its 1 s bound, not the 120 s it waited for
    assert proc.stderr.splitlines()[-2:] == [
        "hypersweep: the way out did not end within 1 s (its bound); exiting now, without waiting more",
        "hypersweep: interrupted; continue with 'hypersweep resume runs/x'",
    ]
    assert gone(int(proc.stdout.split()[0]))


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # killed, not yet reaped by init
    except psutil.NoSuchProcess:
        return True
