"""What a trial used of its devices: peak memory and GPU utilization, sampled while it runs.

On a CUDA lease the peak is ``torch.cuda.max_memory_allocated`` of the leased devices. A trial
holding a lease runs in its own process (:mod:`cluster.entrypoint`), which reports its own peak with
each report (torch's allocator statistics are per process, so the figure is the trial's alone, even
packed). Where a trial shares the worker's process with others on one device (a data-parallel
launcher's thread), the figure is the device's peak while the trial ran, an upper bound, and
``memory_shared`` says how many trials were on it at most. Without CUDA the host's resident memory
(the trial's own process, or the worker's, and the processes it started, e.g. a data-parallel
trial's ranks) stands in. GPU utilization is NVML's (``pynvml``), averaged over the samples, where NVML is there.
A sample whose memory grew by a tenth since the last one sent goes to the controller at once
(``on_memory``), so a worker killed for memory leaves its last figure behind.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psutil  # a dependency of distributed

__all__ = ["TrialMonitor", "cuda_peak", "rss_bytes", "nvml_utilization", "CUDA", "RSS"]

CUDA, RSS = "cuda", "rss"  # what ``peak_memory`` measured
START_REUSE = 0.05  # seconds: a trial's first host-memory figure may be one taken this recently in its process
TREE_REUSE = 0.05  # seconds: a walk of the process tree that found no child process stands this long (see _proc_rss)
GROWTH_SENT = 1.1  # memory grown by 10% since the last figure sent: send it


def _cuda_ready() -> Any:
    """The torch module when this process has CUDA up (never imports torch itself), else None."""
    from trainers.loaded import loaded  # no torch: never imports it

    torch = loaded("torch")  # not one a trial's thread is still importing
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return torch


def cuda_peak(devices: Sequence[int]) -> int | None:
    """The largest ``max_memory_allocated`` over ``devices`` in this process; None without CUDA."""
    torch = _cuda_ready()
    if torch is None or not devices:
        return None
    return max(int(torch.cuda.max_memory_allocated(d)) for d in devices)


def reset_cuda_peak(devices: Sequence[int]) -> None:
    """Start the peak afresh on ``devices`` (only where the trial is alone on them)."""
    torch = _cuda_ready()
    for d in devices if torch is not None else ():
        torch.cuda.reset_peak_memory_stats(d)


def rss_bytes(pid: int | None = None, within: float = 0.0) -> int:
    """Resident memory of process ``pid`` (default: this one) and every process it started; ``within``: a figure
    measured at most that many seconds ago will do (a trial starting right after another on its slot takes the
    one its predecessor ended with: a walk of the process tree is a dozen file reads)."""
    pid = pid or os.getpid()
    global _last_rss
    last_pid, at, value = _last_rss
    if within > 0 and last_pid == pid and time.monotonic() - at <= within:
        return value
    value = _rss_now(pid)
    _last_rss = (pid, time.monotonic(), value)
    return value


_last_rss: tuple[int, float, int] = (0, -math.inf, 0)  # the last figure rss_bytes measured: (pid, when, bytes)


def _rss_now(pid: int) -> int:
    if _proc_children_readable():
        return _proc_rss(pid)
    try:
        proc = psutil.Process(pid)
        total = proc.memory_info().rss
        for child in proc.children(recursive=True):  # reads every process's stat file: a few ms
            try:
                total += child.memory_info().rss
            except psutil.Error:
                continue
        return int(total)
    except psutil.Error:
        return 0


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_children_file: bool | None = None  # whether /proc/<pid>/task/<tid>/children is there (Linux, CONFIG_PROC_CHILDREN)


def _proc_children_readable() -> bool:
    global _children_file
    if _children_file is None:
        _children_file = os.path.exists(f"/proc/self/task/{threading.get_native_id()}/children")
    return _children_file


_last_walk: tuple[int, float, bool] = (0, -math.inf, True)  # the last tree walk: (pid, when, found a child process)


def _proc_rss(pid: int) -> int:
    """``rss_bytes`` from ``/proc``: the whole tree (:func:`_proc_tree`), or only the process's own ``statm``
    when a walk at most ``TREE_REUSE`` s ago found it had no child process. A walk reads a file per thread (a
    dozen in a worker); short trials one after another on a worker took two walks each, a third of the worker's
    time per trivial trial. A child started within that time is counted from the next walk on."""
    global _last_walk
    now = time.monotonic()
    last_pid, at, children = _last_walk
    if last_pid == pid and not children and now - at <= TREE_REUSE:
        try:
            with open(f"/proc/{pid}/statm", "rb") as fh:
                return int(fh.read().split()[1]) * _PAGE
        except (OSError, ValueError, IndexError):
            pass  # it ended meanwhile: the walk says so
    total, walked = _proc_tree(pid)
    _last_walk = (pid, now, walked > 1)
    return total


def _proc_tree(pid: int) -> tuple[int, int]:
    """The tree's resident bytes and how many processes it holds (``pid`` included, while it lives), from ``/proc``
    alone: each process's ``statm`` and its threads' ``children``, walked down (tens of microseconds, where psutil's
    ``children`` scans every process on the host)."""
    total, todo, seen, found = 0, [pid], set(), 0
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            with open(f"/proc/{current}/statm", "rb") as fh:
                total += int(fh.read().split()[1]) * _PAGE
            tids = os.listdir(f"/proc/{current}/task")
        except (OSError, ValueError, IndexError):
            continue  # it ended meanwhile
        found += 1
        for tid in tids:
            try:
                with open(f"/proc/{current}/task/{tid}/children", "rb") as fh:
                    todo.extend(int(child) for child in fh.read().split())
            except (OSError, ValueError):
                continue
    return total, found


class _Nvml:
    """NVML handles for the physical device ids, or nothing where ``pynvml`` or a driver is missing."""

    def __init__(self, physical: Sequence[int]) -> None:
        self.handles: list[Any] = []
        try:
            import pynvml  # optional: nvidia-ml-py
        except ImportError:
            return
        try:
            pynvml.nvmlInit()
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(int(d)) for d in physical]
            self._pynvml = pynvml
        except Exception:  # noqa: BLE001 - no driver, no device: no utilization figure
            self.handles = []

    def utilization(self) -> float | None:
        if not self.handles:
            return None
        try:
            rates = [self._pynvml.nvmlDeviceGetUtilizationRates(h).gpu for h in self.handles]
        except Exception:  # noqa: BLE001
            return None
        return float(sum(rates)) / len(rates)


def nvml_utilization(physical: Sequence[int]) -> float | None:
    """GPU utilization (%) of the physical devices now, averaged; None without NVML."""
    return _Nvml(physical).utilization()


class _Ticker:
    """One thread per process that samples every running trial's monitor when it is due.

    A thread per trial cost the worker a start and a join (about 2 ms) on every trial, which a 100 ms trial
    cannot spare; this one starts with the first monitor and stays. A monitor added is due after the one thread
    wakes anyway (trials one after another on a slot), so it wakes the thread only when it is due sooner: each
    wake-up costs the trial's thread a hand-over of the interpreter.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[TrialMonitor, float] = {}
        self._thread: threading.Thread | None = None
        self._wakes = math.inf  # when the thread wakes next by itself (monotonic)

    def add(self, monitor: TrialMonitor) -> None:
        with self._cond:
            due = self._due[monitor] = time.monotonic() + monitor.every
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="hypersweep-trial-monitor", daemon=True)
                self._thread.start()
            if due < self._wakes:
                self._wakes = due
                self._cond.notify()

    def remove(self, monitor: TrialMonitor) -> None:
        with self._cond:
            self._due.pop(monitor, None)

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                wait = min(self._due.values(), default=math.inf) - now
                if wait > 0:
                    self._wakes = now + wait
                    self._cond.wait(None if math.isinf(wait) else wait)
                    self._wakes = math.inf
                    continue
                ready = [m for m, due in self._due.items() if due <= now]
                for monitor in ready:
                    self._due[monitor] = now + monitor.every
            for monitor in ready:
                monitor.tick()

    def after_fork(self) -> None:
        """A forked child has none of the parent's threads: it starts its own ticker when it needs one."""
        self._cond = threading.Condition()
        self._due = {}
        self._thread = None
        self._wakes = math.inf


_TICKER = _Ticker()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_TICKER.after_fork)


class TrialMonitor:
    """Samples one trial's memory (and GPU utilization) every ``every`` s, from ``start`` to ``stop``.

    The samples are taken on the process's one monitor thread (:class:`_Ticker`), and at ``start`` and ``stop``.
    A figure goes up (``on_memory``, so that a worker killed for memory leaves one behind) from the ticks, and from
    a sample the trial's own process asks for, each time it grew by ``GROWTH_SENT``; the start and stop samples
    send none (the outcome carries the peak), so a trial shorter than one tick sends no figure of its own.
    """

    def __init__(
        self,
        devices: Sequence[int] = (),
        physical: Sequence[int] = (),
        every: float = 0.1,
        on_memory: Callable[[int], None] | None = None,
        tenants: Callable[[], int] | None = None,
    ) -> None:
        self.devices = tuple(devices)
        self._physical = tuple(physical)
        self.every = every
        self._on_memory = on_memory
        self._tenants = tenants
        self._peak = 0
        self._kind = RSS
        self._sent = 0
        self._utilization: list[float] = []
        self.shared = 1
        self._pid: int | None = None  # the trial's own process, when it has one (else this one)
        self._reported: int | None = None  # the CUDA peak the trial's own process reported
        self._lock = threading.Lock()  # one sample at a time; none after stop
        self._stopped = False
        self._nvml: _Nvml | None = None

    def start(self) -> TrialMonitor:
        if self._tenants is not None and self._tenants() <= 1:
            reset_cuda_peak(self.devices)
        self._nvml = _Nvml(self._physical) if self._physical else None
        with self._lock:
            self._sample(send=False, within=START_REUSE)
        _TICKER.add(self)
        return self

    def follow(self, pid: int) -> None:
        """Measure process ``pid`` (the trial's own, and what it starts) instead of this one."""
        self._pid = pid

    def device_peak(self, peak: int) -> None:
        """The CUDA peak the trial's own process measured (its allocator's statistics are its own)."""
        self._reported = max(self._reported or 0, int(peak))
        self.sample()

    def sample(self) -> int:
        """Take one sample now; the peak so far (bytes)."""
        with self._lock:
            if not self._stopped:
                self._sample()
            return self._peak

    def tick(self) -> None:
        """A sample from the monitor thread: a figure missed is no reason to disturb the trial."""
        try:
            self.sample()
        except Exception:  # noqa: BLE001
            return

    def _sample(self, send: bool = True, within: float = 0.0) -> None:
        cuda = cuda_peak(self.devices)
        if cuda is None:
            cuda = self._reported
        if cuda is not None:
            if self._kind != CUDA:
                self._peak = 0  # host memory sampled before CUDA was up: not a device figure
            self._kind, value = CUDA, cuda
        else:
            value = rss_bytes(self._pid, within)
        self._peak = max(self._peak, value)
        if self._tenants is not None:
            self.shared = max(self.shared, self._tenants())
        if self._nvml is not None and (u := self._nvml.utilization()) is not None:
            self._utilization.append(u)
        if send and self._on_memory is not None and value > self._sent * GROWTH_SENT:
            self._sent = value
            self._on_memory(value)

    def stop(self) -> dict[str, Any]:
        """Stop sampling (a sample under way on the monitor thread ends first); the figures for the outcome."""
        _TICKER.remove(self)
        with self._lock:
            if not self._stopped:
                self._sample(send=False)  # the outcome carries it
            self._stopped = True
        figures: dict[str, Any] = {"peak_memory": self._peak, "memory_kind": self._kind, "memory_shared": self.shared}
        if self._utilization:
            figures["gpu_utilization"] = sum(self._utilization) / len(self._utilization)
        return figures

    @property
    def peak(self) -> int:
        return self._peak
