"""One rank of a data-parallel trial: ``python -m trainers.ddp_rank ENTRY CONFIG.json``.

:func:`trainers.ddp.launch` starts one of these per rank; nobody else should. The
rank runs the same trainer function ``ENTRY`` as a single-process trial would
(imported by name, or loaded from the file ``HYPERSWEEP_DDP_TRAINER`` names when
the launcher pickled it), with these environment variables (the ``torchrun`` ones,
so a trainer written for ``torchrun`` works unchanged):

- ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``: this rank, of k,
  all on one machine;
- ``MASTER_ADDR=127.0.0.1``, ``MASTER_PORT``: the rendezvous store, hosted by the
  launching process (``TORCHELASTIC_USE_AGENT_STORE=True``: every rank is a client),
  so ``dist.init_process_group(backend)`` just works;
- ``CUDA_VISIBLE_DEVICES``: on GPUs, rank r sees exactly one device, the r-th id
  of ``config.devices``; inside the rank that device is ``cuda:0``.

The trainer detects that it is a rank with :func:`current_rank`, and sets up the
process group with :func:`process_group`. It gets a :class:`RankReporter`: on
rank 0 ``report`` goes to the launcher over a private socket (inherited fd, JSON
messages; never stdout) and waits for its answer, which carries the controller's
stop request; on other ranks ``report`` does nothing. ``should_stop`` is a
collective: rank 0's answer is broadcast, so every rank must call it at the same
points (the epoch loop does, at every epoch end) and all stop together.

A rank that raises writes its traceback (with the time) to ``rank<r>.error`` in
the launch folder, so the launcher can blame the rank that failed first, then exits
at once with status 1, without tearing down its trainer (see :func:`_exit_failed`).
A rank whose launcher dies kills itself (a watchdog thread watches the parent pid).

The same program runs a whole single-process trial in a process of its own
(:func:`trainers.ddp.launch_solo`, ``HYPERSWEEP_TRIAL_PROCESS=1``): then there is no ``RANK`` and no
store, ``CUDA_VISIBLE_DEVICES`` is the trial's lease, ``should_stop`` asks the launcher (which asks
the controller), and each report and the result carry the process's CUDA memory peak.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import datetime
import faulthandler
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import cloudpickle

from trainers.api import TrainerFn, TrialConfig, _json_float, load_trainer, objective_values, report_values
from trainers.loaded import loaded

if TYPE_CHECKING:
    import torch

__all__ = ["RankInfo", "RankReporter", "current_rank", "process_group", "rank_device", "main"]

ENV_DIR = "HYPERSWEEP_DDP_DIR"  # the launch folder (error files)
ENV_FD = "HYPERSWEEP_DDP_FD"  # rank 0: the fd of its socket to the launcher
ENV_PARENT = "HYPERSWEEP_DDP_PARENT"  # the launcher's pid, for the watchdog
ENV_PICKLED = "HYPERSWEEP_DDP_TRAINER"  # the trainer pickled by the launcher (cloudpickle): loaded instead of ENTRY
ENV_SOLO = "HYPERSWEEP_TRIAL_PROCESS"  # "1": a whole trial in its own process (trainers.ddp.launch_solo), no rank
TIMINGS_SUFFIX = ".timings.json"  # rank<r>.timings.json in the launch folder: this rank's epoch times
DEFAULT_PG_TIMEOUT = datetime.timedelta(minutes=10)


@dataclasses.dataclass(frozen=True)
class RankInfo:
    """Where this process stands in a data-parallel trial (from the environment)."""

    rank: int
    world_size: int
    local_rank: int


def current_rank() -> RankInfo | None:
    """This process's rank, or ``None`` when it is not a rank (no ``RANK``/``WORLD_SIZE``/``MASTER_*``)."""
    names = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    if not all(os.environ.get(name) for name in names):
        return None
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return RankInfo(rank, world_size, int(os.environ.get("LOCAL_RANK", rank)))


def rank_device(config: TrialConfig) -> torch.device:
    """``cuda:0`` (the one device this rank sees) when the trial has devices, else the CPU."""
    import torch

    if config.device == "cpu" or not config.devices:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"devices={list(config.devices)}: CUDA is not available in this rank "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})"
        )
    return torch.device("cuda", 0)


@contextlib.contextmanager
def process_group(device: torch.device, timeout: datetime.timedelta = DEFAULT_PG_TIMEOUT) -> Iterator[None]:
    """The default process group for this rank: NCCL on CUDA, gloo on the CPU; destroyed on exit."""
    import torch
    import torch.distributed as dist

    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=timeout)
    try:
        yield
    finally:
        dist.destroy_process_group()


class RankReporter:
    """The reporter a rank's trainer gets (see the module docstring); rank 0 holds ``connection``."""

    def __init__(self, connection: Connection | None, solo: bool = False) -> None:
        self._connection = connection
        self._solo = solo  # a whole trial in its own process: should_stop asks the launcher
        self._stop = False
        self._marks = [time.time()]  # the rank's start, then each epoch end (every rank calls should_stop there)

    def timings(self, rank: int) -> dict[str, Any]:
        """This rank's own account: the seconds of each epoch, measured here (the first includes start-up)."""
        seconds = [round(b - a, 6) for a, b in zip(self._marks, self._marks[1:])]
        return {
            "rank": rank,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "epoch_seconds": seconds,
            "total_seconds": round(time.time() - self._marks[0], 6),
        }

    def report(self, step: int, metrics: Mapping[str, float]) -> None:
        if self._connection is None:
            return
        plain = {k: _json_float(v) for k, v in report_values(step, metrics).items()}
        self._ask({"kind": "report", "step": int(step), "metrics": plain})

    def _ask(self, message: dict[str, Any]) -> None:
        """Send ``message`` (with this process's CUDA peak, where CUDA is up) and take the launcher's stop flag."""
        assert self._connection is not None
        self._connection.send_bytes(json.dumps({**message, **_cuda_peak()}).encode())
        answer = json.loads(self._connection.recv_bytes())
        self._stop = self._stop or bool(answer["stop"])

    def query(self, question: Mapping[str, Any]) -> dict[str, Any]:
        """Ask the controller ``question`` through the launcher and return its answer (a define-by-run trial's
        suggestion); only a trial in its own process asks."""
        if not self._solo or self._connection is None:
            raise RuntimeError("only a trial in a process of its own asks the controller questions")
        self._connection.send_bytes(json.dumps({"kind": "query", "query": dict(question), **_cuda_peak()}).encode())
        return dict(json.loads(self._connection.recv_bytes())["answer"])

    def should_stop(self) -> bool:
        """Rank 0's stop flag, broadcast to every rank (a collective once the process group is up); a trial in its
        own process asks its launcher."""
        if self._solo and self._connection is not None and not self._stop:
            self._ask({"kind": "ask"})
            return self._stop
        dist = loaded("torch.distributed")  # no process group without it: the trainer never imported it
        if dist is None or not dist.is_initialized() or dist.get_world_size() == 1:
            return self._stop
        import torch

        device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
        flag = torch.tensor([int(self._stop)], dtype=torch.int32, device=device)
        dist.broadcast(flag, src=0)
        self._stop = bool(flag.item())
        self._marks.append(time.time())
        return self._stop

    def send_result(self, metrics: Any) -> None:
        """Send what the trainer returned: a dict of metrics, or (as an Optuna objective returns) a number or a tuple
        of numbers, the values of the study's objectives; anything else is a ``TypeError`` that names it."""
        if isinstance(metrics, Mapping):
            payload: dict[str, Any] = {"metrics": {str(k): _json_float(v) for k, v in metrics.items()}}
        elif (values := objective_values(metrics)) is not None:
            payload = {"values": list(values)}
        else:
            raise TypeError(
                f"the trainer returned {type(metrics).__name__} {metrics!r:.60}; a trainer returns a dict of metrics, "
                "a number or a tuple of numbers (one per objective)"
            )
        if self._connection is not None:
            self._connection.send_bytes(json.dumps({"kind": "result", **payload, **_cuda_peak()}).encode())


def _cuda_peak() -> dict[str, int]:
    """``{"cuda_peak": bytes}``: this process's largest ``max_memory_allocated`` over its devices, where CUDA is up.

    A process whose trainer never imported torch has no CUDA to ask (and is not made to import it here)."""
    torch = loaded("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    return {"cuda_peak": max(int(torch.cuda.max_memory_allocated(d)) for d in range(torch.cuda.device_count()))}


def _watch_parent(parent: int) -> None:
    """Die with the launcher: the kernel's parent-death signal (Linux), and a watchdog thread.

    The death signal fires when the launching *thread* ends; that thread waits in
    ``launch`` for as long as the ranks live, so it ends only with its process. The
    watchdog (any POSIX) kills the rank's process group once the rank is orphaned,
    unless C++ code holds the GIL.
    """
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    if os.getppid() != parent:  # the launcher died before the death signal was armed
        os.killpg(os.getpgid(0), signal.SIGKILL)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os.killpg(os.getpgid(0), signal.SIGKILL)

    threading.Thread(target=watch, name="ddp-parent-watchdog", daemon=True).start()


def _write_error(folder: Path, rank: int, exc: BaseException) -> None:
    text = f"{type(exc).__name__}: {exc}".strip()
    cls = type(exc)
    record = {
        "time": time.time(),
        "error": text.splitlines()[0],
        "traceback": traceback.format_exc(),
        "error_type": cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}",
        "errnos": _errnos(exc),
    }
    tmp = folder / f".rank{rank}.error.tmp"
    tmp.write_text(json.dumps(record))
    os.replace(tmp, folder / f"rank{rank}.error")


def _errnos(exc: BaseException) -> list[int]:
    """The ``errno`` of each ``OSError`` in the chain ``exc`` was raised from (a full disk, say), outermost first."""
    seen: list[int] = []
    current: BaseException | None = exc
    while current is not None and len(seen) < 20:
        if isinstance(current, OSError) and current.errno is not None:
            seen.append(int(current.errno))
        current = current.__cause__ or current.__context__
    return seen


def _write_timings(folder: Path, record: Mapping[str, Any]) -> None:
    tmp = folder / f".rank{record['rank']}.timings.tmp"
    tmp.write_text(json.dumps(dict(record)))
    os.replace(tmp, folder / f"rank{record['rank']}{TIMINGS_SUFFIX}")


def _exit_failed() -> NoReturn:
    """End a failed rank now (status 1), its error already on record, without tearing down its trainer.

    The traceback keeps the trainer's frames alive, so leaving ``main`` normally would
    free the model there, and freeing a DDP model can block for good: its reducer holds
    the last reference to the gloo group (``process_group`` destroyed the default one
    already), whose destructor joins the group's worker threads while holding the GIL,
    and a worker still freeing a finished collective's tensors waits for the GIL. The
    rank would then never exit, and the launcher never see the failure. Nothing of a
    failed rank's state needs a clean teardown; the kernel closes its sockets and files.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(1)


def _trainer(entry: str) -> TrainerFn:
    """The function the launcher pickled for this rank, when it did; else ``entry`` imported by name."""
    pickled = os.environ.get(ENV_PICKLED)
    if pickled:
        return cloudpickle.loads(Path(pickled).read_bytes())
    return load_trainer(entry)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    solo = os.environ.get(ENV_SOLO) == "1"
    info = RankInfo(0, 1, 0) if solo else current_rank()
    if len(args) != 2 or info is None or ENV_DIR not in os.environ:
        print("python -m trainers.ddp_rank ENTRY CONFIG.json: started by trainers.ddp.launch only", file=sys.stderr)
        return 2
    entry, config_path = args
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1 <pid>: stacks to the rank's stderr
    if ENV_PARENT in os.environ:
        _watch_parent(int(os.environ[ENV_PARENT]))
    connection = Connection(int(os.environ[ENV_FD])) if info.rank == 0 and ENV_FD in os.environ else None
    reporter = RankReporter(connection, solo=solo)
    try:
        config = TrialConfig.from_json_file(config_path)
        metrics: Any = _trainer(entry)(config, reporter)
        own = {**reporter.timings(info.rank), "seed": config.seed, "master": os.environ.get("MASTER_ADDR", "")}
        _write_timings(Path(os.environ[ENV_DIR]), own)
        reporter.send_result(metrics)
    except BaseException as exc:  # noqa: BLE001 - reported to the launcher, then the rank exits 1
        _write_error(Path(os.environ[ENV_DIR]), info.rank, exc)
        traceback.print_exc()
        _exit_failed()
    finally:
        if connection is not None:
            connection.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
