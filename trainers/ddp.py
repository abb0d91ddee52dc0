"""Launch one data-parallel trial as k rank processes on this machine.

``launch(trainer, config, reporter)`` is called where a single-process trial would
run (a Dask worker thread, ``python -m trainers``, a test). It starts
``config.data_parallel`` processes ``python -m trainers.ddp_rank ENTRY CONFIG``
(``subprocess``, not ``multiprocessing``: Dask worker processes are daemonic and
may not have multiprocessing children), each running the trainer as one rank
(see :mod:`trainers.ddp_rank` for what a rank sees). Where this process keeps a warm
pool (a Dask worker: :mod:`trainers.warm_pool`), each such process is a fork of the
pool's server instead, the same program with the same environment, in a tenth of a
second rather than the seconds a fresh interpreter takes to import torch.

How the ranks get the trainer: ``trainer`` is its entry ``"module:function"``,
which each rank imports, or the function itself, which the launcher pickles
(cloudpickle) to ``trainer.pkl`` in the launch folder for the ranks to load: by
value when it cannot be imported by name (defined in ``__main__`` of a script or
notebook, or nested in another function), by reference otherwise. An entry
registered in this process (:func:`trainers.api.registered_trainer`: a function
handed over here, or a trainer shipped to this worker by value and running now)
goes as that function, so a trainer may launch itself by its entry wherever it runs.

How they talk:

- rendezvous: the launcher hosts the ``torch.distributed`` TCP store on a free
  port of 127.0.0.1 (the OS picks it, so there is no race for the port), listening
  on loopback only (``TCPStore`` itself would listen on every interface, whatever
  host it is given: the launcher binds the socket and hands it over); the ranks
  join it as clients. Backend: NCCL when the trial has CUDA devices, else gloo
  (on the loopback interface).
- devices: rank r runs with ``CUDA_VISIBLE_DEVICES`` set to the r-th id of
  ``config.devices`` (translated through the launcher's own
  ``CUDA_VISIBLE_DEVICES`` when it has one, since leased ids index the visible
  set), so inside every rank its device is ``cuda:0``.
- reports: rank 0 holds one end of a socket pair (an inherited fd, nothing on
  the network, nothing on stdout); each report is a JSON message, the launcher
  calls ``reporter.report`` and then ``reporter.should_stop()`` and answers with
  the stop flag, which rank 0 broadcasts to every rank at the epoch end. A trial in its own
  process may also ask the controller a question (``query``, a define-by-run suggestion): the
  launcher passes it to ``reporter.query`` and sends the answer back.
- output: each rank's stdout and stderr go to files in a private temporary
  folder, removed when the trial ends; when the trial keeps a log
  (``config.log_dir``), their lines are copied into the launcher's
  ``sys.stdout``/``sys.stderr`` as they come (:mod:`trainers.rank_output`).

A whole trial in a process of its own: ``launch_solo(trainer, config, reporter, visible)``
starts one such process, with no rank variables and no store, whose ``CUDA_VISIBLE_DEVICES``
is ``visible`` (its GPU lease), over the same channel: reports, stop requests (each
``should_stop`` asks the launcher), its output, its CUDA memory peak and its error
(:class:`TrialProcessError`: type, traceback) come back as a rank 0's do. A Dask worker
runs every trial holding a GPU lease that way (``cluster.entrypoint``).

Failures: when any rank exits non-zero, the launcher kills the others (SIGTERM
to each rank's process group, SIGKILL after ``grace`` seconds) and raises
:class:`RankError` naming the rank that failed first, with its traceback. The
same clean-up runs on every way out (success, stop, timeout, an exception or
KeyboardInterrupt in the launching thread), so no rank outlives ``launch``; a
rank whose launcher is killed outright kills itself.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import cloudpickle

from trainers import warm_pool
from trainers.api import Reporter, TrainerFn, TrialConfig, entry_of, registered_trainer
from trainers.ddp_rank import ENV_DIR, ENV_FD, ENV_PARENT, ENV_PICKLED, ENV_SOLO, TIMINGS_SUFFIX
from trainers.ddp_span import RankSpan, interface_of
from trainers.rank_output import RankOutput

if TYPE_CHECKING:
    import torch.distributed as dist

__all__ = [
    "launch",
    "launch_part",
    "launch_solo",
    "rank_devices",
    "rank_trainer",
    "RankError",
    "TrialProcessError",
    "RankSpan",
]

POLL_SECONDS = 0.05
EXIT_SECONDS = 30.0  # after rank 0's result, how long the ranks may take to exit before they are killed
STDERR_TAIL = 4000
Returned = dict[str, float] | tuple[float, ...]  # rank 0's result: its metrics, or the objectives' values it returned
STORE_HOST = "127.0.0.1"  # every rank runs on this machine: the rendezvous store listens on loopback only
RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", ENV_FD)
PICKLE_NAME = "trainer.pkl"  # in the launch folder: the trainer, for ranks that cannot import it by name


class RankError(RuntimeError):
    """A rank of a data-parallel trial failed; ``rank`` and its ``traceback`` (or stderr tail)."""

    def __init__(self, message: str, rank: int, traceback: str) -> None:
        super().__init__(message)
        self.rank = rank
        self.traceback = traceback


class TrialProcessError(RankError):
    """A trial in its own process (:func:`launch_solo`) failed: ``child_error`` is its error's one line
    (``Type: message``), ``child_error_type`` its class, ``errnos`` the errno of each ``OSError`` it was raised
    from, ``traceback`` the process's own (or its stderr's tail when it died without one)."""

    def __init__(self, line: str, error_type: str, traceback: str, errnos: Sequence[int] = ()) -> None:
        super().__init__(line, 0, traceback)
        self.child_error, self.child_error_type, self.errnos = line, error_type, tuple(errnos)


def rank_devices(config: TrialConfig, local: int | None = None) -> tuple[int, ...]:
    """The CUDA ids the k ranks run on, one each; ``()`` for gloo on the CPU.

    ``device="cpu"``: none. Leased ``devices``: the first k (fewer than k is an
    error). No lease, ``device`` "auto" or "cuda", and CUDA present: ``0..k-1``.
    ``local``: the ranks on this machine when the trial spans several (else all k).
    """
    k = config.data_parallel if local is None else local
    if config.device == "cpu":
        return ()
    if config.devices:
        if len(config.devices) < k:
            raise ValueError(
                f"devices={list(config.devices)}: data_parallel={k} needs one device per rank ({k} devices)"
            )
        return tuple(config.devices[:k])
    import torch  # only a trial that may take CUDA devices asks torch for them

    if not torch.cuda.is_available():
        if config.device == "cuda":
            raise RuntimeError(f"device='cuda', data_parallel={k}: CUDA is not available in this process")
        return ()
    if torch.cuda.device_count() < k:
        raise ValueError(f"data_parallel={k}: needs {k} CUDA devices, {torch.cuda.device_count()} visible")
    return tuple(range(k))


def launch(
    trainer: str | TrainerFn,
    config: TrialConfig,
    reporter: Reporter,
    timeout: float | None = None,
    *,
    grace: float = 5.0,
    on_start: Callable[[Sequence[int]], None] | None = None,
) -> Returned:
    """Run ``trainer`` (a function, or its entry "module:function") as ``config.data_parallel`` ranks; return
    rank 0's metrics (or the number or tuple of numbers it returned, as floats).

    Reports from rank 0 reach ``reporter`` as they happen. ``timeout`` (seconds) bounds
    the whole trial (``TimeoutError``); ``on_start`` gets the ranks' pids once started.
    """
    if timeout is not None and timeout <= 0:
        raise ValueError(f"timeout={timeout!r}: must be > 0 seconds (or None)")
    entry, pickled = rank_trainer(trainer)
    devices = rank_devices(config)
    rank_config = TrialConfig.from_dict({**config.to_dict(), "devices": list(devices)})
    with tempfile.TemporaryDirectory(prefix=f"hypersweep-ddp-{config.study}-{config.number}-") as folder:
        ranks = _Ranks(Path(folder), config.data_parallel, devices, relay=config.log_dir is not None)
        try:
            ranks.start(entry, rank_config, pickled)
            if on_start is not None:
                on_start(ranks.pids)
            return ranks.serve(reporter, None if timeout is None else time.monotonic() + timeout)
        finally:
            ranks.stop(grace)


def launch_part(
    trainer: str | TrainerFn,
    config: TrialConfig,
    reporter: Reporter,
    span: RankSpan,
    *,
    watch: Callable[[], str] | None = None,
    grace: float = 5.0,
    log_dir: Path | None = None,
) -> tuple[Returned, list[dict[str, Any]]]:
    """Run this host's part of a trial spanning several hosts: ranks ``span.ranks`` of ``span.world_size``.

    The store must already listen at ``span.master_addr:master_port`` (rank 0's part hosts it,
    :func:`trainers.ddp_span.host_store`). Returns rank 0's metrics (``{}`` on a part without rank 0)
    and each local rank's timings (``rank``, ``host``, ``epoch_seconds``). ``watch`` is called as the
    part waits; a non-empty answer (another part failed, its worker was lost, the trial was stopped
    for good) ends every local rank with :class:`RankError`. ``log_dir``: each rank's output also goes
    to ``rank<r>.log`` there (its own log).
    """
    entry, pickled = rank_trainer(trainer)
    devices = rank_devices(config, span.local)
    rank_config = TrialConfig.from_dict({**config.to_dict(), "devices": list(devices)})
    prefix = f"hypersweep-ddp-{config.study}-{config.number}-part{span.first_rank}-"
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        ranks = _Ranks(Path(folder), span.local, devices, relay=config.log_dir is not None, span=span)
        try:
            ranks.start(entry, rank_config, pickled)
            metrics = ranks.serve(reporter, None, watch)
        finally:
            ranks.stop(grace)
            if log_dir is not None:
                ranks.keep_logs(log_dir)
        return metrics, ranks.timings()


def launch_solo(
    trainer: str | TrainerFn,
    config: TrialConfig,
    reporter: Reporter,
    visible: str,
    *,
    grace: float = 5.0,
    on_start: Callable[[Sequence[int]], None] | None = None,
    on_memory: Callable[[int], None] | None = None,
) -> Returned:
    """Run a whole trial (``trainer(config, reporter)``) in a process of its own that sees only the devices
    ``visible`` (its ``CUDA_VISIBLE_DEVICES``: physical ids), as the ranks of :func:`launch` run.

    ``config.devices`` should then index that set (``0..n-1``: ``cuda:0`` is the first). Reports reach
    ``reporter`` as they happen, and each ``should_stop`` in the trial asks ``reporter.should_stop()``. The
    process's output goes to this thread's streams when the trial keeps a log; ``on_start`` gets its pid,
    ``on_memory`` each CUDA memory peak it reports. When it raises, :class:`TrialProcessError` carries its error.
    """
    entry, pickled = rank_trainer(trainer)
    with tempfile.TemporaryDirectory(prefix=f"hypersweep-trial-{config.study}-{config.number}-") as folder:
        ranks = _Ranks(Path(folder), 1, (), relay=config.log_dir is not None, solo=visible)
        ranks.on_memory = on_memory
        try:
            ranks.start(entry, config, pickled)
            if on_start is not None:
                on_start(ranks.pids)
            return ranks.serve(reporter, None)
        finally:
            ranks.stop(grace)


def rank_trainer(trainer: str | TrainerFn) -> tuple[str, bytes | None]:
    """The entry the ranks are told, and the pickled function they load instead (``None``: they import the entry)."""
    if isinstance(trainer, str):
        fn, entry = registered_trainer(trainer), trainer
        if fn is None:
            return entry, None
    elif callable(trainer):
        fn, entry = trainer, entry_of(trainer)
    else:
        raise TypeError(f"trainer={trainer!r}: must be a function or its entry 'package.module:function'")
    try:
        return entry, cloudpickle.dumps(fn)
    except Exception as exc:  # noqa: BLE001 - pickling raises anything its objects raise
        raise TypeError(
            f"trainer {entry} cannot be pickled for its data-parallel ranks ({type(exc).__name__}: {exc})".splitlines()[
                0
            ]
        ) from exc


class _Process(Protocol):
    """A rank's process: a fresh ``subprocess.Popen``, or one from the worker's warm pool (:mod:`trainers.warm_pool`)."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int | None: ...


class _Ranks:
    """The k processes of one launch, their channel to rank 0, and their clean-up."""

    def __init__(
        self,
        folder: Path,
        world_size: int,
        devices: tuple[int, ...],
        relay: bool = False,
        span: RankSpan | None = None,
        solo: str | None = None,
    ) -> None:
        """``world_size``: the ranks started here (``span.local`` for a part of a wider trial); ``solo``: one whole
        trial (no rank, no store) that sees the devices ``solo`` names (``CUDA_VISIBLE_DEVICES``)."""
        self.folder, self.world_size, self.devices, self.span = folder, world_size, devices, span
        self.solo = solo
        self.on_memory: Callable[[int], None] | None = None  # each CUDA memory peak the process reports
        self.first = span.first_rank if span is not None else 0  # the global rank of local rank 0
        self.output = RankOutput(folder, range(self.first, self.first + world_size)) if relay else None
        self.procs: list[_Process] = []
        self.connection: Connection | None = None
        self.store: dist.TCPStore | None = None
        self.pickled_path: Path | None = None

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def start(self, entry: str, config: TrialConfig, pickled: bytes | None = None) -> None:
        config_path = self.folder / "config.json"
        config_path.write_text(json.dumps(config.to_dict()))
        if pickled is not None:
            self.pickled_path = self.folder / PICKLE_NAME
            self.pickled_path.write_bytes(pickled)
        if self.span is None and self.solo is None:
            self.store = loopback_store(self.world_size)
        ours, theirs = socket.socketpair()
        try:
            self.connection = Connection(ours.detach())
            for rank in range(self.first, self.first + self.world_size):
                command = ["trainers.ddp_rank", entry, str(config_path)]  # python -m ...
                fds = (theirs.fileno(),) if rank == 0 else ()
                self.procs.append(self._process(command, self._env(rank, theirs.fileno()), rank, fds, entry))
            if self.first > 0:
                self.connection.close()  # no rank 0 here: no reports, and serve need not wait for them
        finally:
            theirs.close()

    def _process(
        self, command: list[str], env: dict[str, str], rank: int, fds: tuple[int, ...], entry: str
    ) -> _Process:
        """Rank ``rank``'s process: from the warm pool where this process keeps one, else a fresh interpreter."""
        with open(self.folder / f"rank{rank}.out", "wb") as out, open(self.folder / f"rank{rank}.err", "wb") as err:
            if warm_pool.enabled():
                preload = warm_pool.preloads(entry)
                warm = warm_pool.start(command, env, (out.fileno(), err.fileno(), *fds), ENV_FD, preload)
                if warm is not None:
                    return warm
            return subprocess.Popen(
                [sys.executable, "-m", *command],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                pass_fds=fds,
                start_new_session=True,
            )

    def _env(self, rank: int, fd: int) -> dict[str, str]:
        """Rank ``rank``'s environment (a global rank: local rank ``rank - self.first``)."""
        if self.solo is not None:
            return self._solo_env(fd)
        span = self.span
        assert self.store is not None or span is not None
        env = dict(os.environ)
        env.update(
            RANK=str(rank),
            WORLD_SIZE=str(self.world_size if span is None else span.world_size),
            LOCAL_RANK=str(rank - self.first),
            LOCAL_WORLD_SIZE=str(self.world_size),
            MASTER_ADDR=STORE_HOST if span is None else span.master_addr,
            MASTER_PORT=str(cast("dist.TCPStore", self.store).port if span is None else span.master_port),
            TORCHELASTIC_USE_AGENT_STORE="True",
            PYTHONPATH=os.pathsep.join(p or os.getcwd() for p in sys.path),  # what the launcher can import
            PYTHONUNBUFFERED="1",
            **{ENV_DIR: str(self.folder), ENV_PARENT: str(os.getpid())},
        )
        if rank == 0:
            env[ENV_FD] = str(fd)
        env.pop(ENV_PICKLED, None)
        if self.pickled_path is not None:
            env[ENV_PICKLED] = str(self.pickled_path)
        if self.devices:
            local = rank - self.first
            env["CUDA_VISIBLE_DEVICES"] = _visible_id(self.devices[local], os.environ.get("CUDA_VISIBLE_DEVICES"))
        if span is not None:
            ifname = interface_of(span.host)
            if ifname:  # the ranks of other hosts reach this one on the interface carrying its address
                env.setdefault("GLOO_SOCKET_IFNAME", ifname)
                env.setdefault("NCCL_SOCKET_IFNAME", ifname)
        elif (
            not self.devices
            and sys.platform == "linux"
            and "GLOO_SOCKET_IFNAME" not in env
            and Path("/sys/class/net/lo").exists()
        ):
            env["GLOO_SOCKET_IFNAME"] = "lo"  # all ranks are on this machine
        return env

    def _solo_env(self, fd: int) -> dict[str, str]:
        """A whole trial's environment: none of the ranks' variables, only its devices visible."""
        env = {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES and k != ENV_PICKLED}
        env.update(
            PYTHONPATH=os.pathsep.join(p or os.getcwd() for p in sys.path),
            PYTHONUNBUFFERED="1",
            CUDA_VISIBLE_DEVICES=str(self.solo),
            **{ENV_DIR: str(self.folder), ENV_PARENT: str(os.getpid()), ENV_FD: str(fd), ENV_SOLO: "1"},
        )
        if self.pickled_path is not None:
            env[ENV_PICKLED] = str(self.pickled_path)
        return env

    def serve(self, reporter: Reporter, deadline: float | None, watch: Callable[[], str] | None = None) -> Returned:
        """Forward rank 0's reports until every rank has exited; raise on the first failure.

        ``watch`` (a part of a wider trial): a non-empty answer is why this part must end now.
        """
        result: Returned | None = None
        exit_deadline = math.inf
        while True:
            why = watch() if watch is not None else ""
            if why:
                raise RankError(
                    f"data-parallel trial: ranks {self.first}..{self.first + self.world_size - 1} ended: {why}",
                    self.first,
                    "",
                )
            if self.output is not None:
                self.output.pump()
            codes = [p.poll() for p in self.procs]
            if any(code not in (None, 0) for code in codes):
                raise self._failure(codes)
            if all(code == 0 for code in codes) and (self.connection is None or self.connection.closed):
                break  # every rank is done and rank 0's messages are all read (its end reads EOF)
            if time.monotonic() > exit_deadline:
                break  # trained, but a rank hangs in its teardown: stop() kills it
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"data-parallel trial ({self.world_size} ranks) still running at its timeout")
            message = self._receive()
            if message is None:
                continue
            if "cuda_peak" in message and self.on_memory is not None:
                self.on_memory(int(message["cuda_peak"]))
            if message["kind"] == "ask":  # a trial in its own process asks for the stop flag
                self._send({"stop": bool(reporter.should_stop())})
                continue
            if message["kind"] == "query":  # ... or asks the controller (a define-by-run suggestion)
                self._send({"answer": _query(reporter, message["query"])})
                continue
            if message["kind"] == "result":  # a dict of metrics, or the objectives' values (a number returned)
                result, exit_deadline = _returned(message), time.monotonic() + EXIT_SECONDS
                continue
            metrics = {str(k): float(v) for k, v in message["metrics"].items()}
            reporter.report(int(message["step"]), metrics)
            self._send({"stop": bool(reporter.should_stop())})
        if result is None and self.first == 0:
            what = "the trial's process" if self.solo is not None else "data-parallel trial: rank 0"
            raise RankError(f"{what} exited without returning metrics", 0, self._stderr_tail(0))
        return {} if result is None else result

    def _receive(self) -> dict[str, Any] | None:
        if self.connection is None or self.connection.closed:
            time.sleep(POLL_SECONDS)
            return None
        try:
            if not self.connection.poll(POLL_SECONDS):
                return None
            return json.loads(self.connection.recv_bytes())
        except (EOFError, OSError):  # rank 0 closed its end (finished or died): watch the exit codes
            self.connection.close()
            return None

    def _send(self, message: Mapping[str, Any]) -> None:
        assert self.connection is not None
        with contextlib.suppress(OSError):  # rank 0 is gone; its exit code tells why
            self.connection.send_bytes(json.dumps(dict(message)).encode())

    def _failure(self, codes: list[int | None]) -> RankError:
        """The error for the rank that failed first (earliest error file, else the first non-zero exit)."""
        errors = []
        for path in self.folder.glob("rank*.error"):
            with contextlib.suppress(OSError, ValueError):
                errors.append((json.loads(path.read_text()), int(path.name[4:].split(".")[0])))
        k = self.world_size if self.span is None else self.span.world_size
        if errors and self.solo is not None:
            record = errors[0][0]
            return TrialProcessError(
                record["error"], record.get("error_type", ""), record["traceback"], record.get("errnos", ())
            )
        if errors:
            record, rank = min(errors, key=lambda item: item[0]["time"])
            return RankError(
                f"data-parallel trial: rank {rank} of {k} failed: {record['error']}\n{record['traceback']}",
                rank,
                record["traceback"],
            )
        local = next(r for r, code in enumerate(codes) if code not in (None, 0))
        code, rank = codes[local], self.first + local
        assert code is not None
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
        tail = self._stderr_tail(rank)
        if self.solo is not None:
            return TrialProcessError(f"the trial's process {how}", "", tail)
        return RankError(f"data-parallel trial: rank {rank} of {k} {how}; its stderr ends:\n{tail}", rank, tail)

    def _stderr_tail(self, rank: int) -> str:
        try:
            return (self.folder / f"rank{rank}.err").read_bytes()[-STDERR_TAIL:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self, grace: float) -> None:
        """Terminate every rank still running (SIGTERM, then SIGKILL after ``grace``) and reap them all."""
        try:
            running = [p for p in self.procs if p.poll() is None]
            _signal_groups(running, signal.SIGTERM)
            end = time.monotonic() + grace
            while running and time.monotonic() < end:
                time.sleep(POLL_SECONDS)
                running = [p for p in running if p.poll() is None]
            _signal_groups(running, signal.SIGKILL)
            for p in self.procs:
                p.wait()
            if self.output is not None:
                self.output.drain()
        finally:
            if self.connection is not None:
                self.connection.close()
            self.store = None

    def timings(self) -> list[dict[str, Any]]:
        """What each rank that finished wrote about its own epochs (``trainers.ddp_rank``), by rank."""
        out = []
        for rank in range(self.first, self.first + self.world_size):
            with contextlib.suppress(OSError, ValueError):
                out.append(json.loads((self.folder / f"rank{rank}{TIMINGS_SUFFIX}").read_text()))
        return out

    def keep_logs(self, log_dir: Path) -> None:
        """Each rank's stdout then stderr, as ``rank<r>.log`` in ``log_dir`` (the launch folder goes with the trial)."""
        with contextlib.suppress(OSError):
            log_dir.mkdir(parents=True, exist_ok=True)
            for rank in range(self.first, self.first + self.world_size):
                parts = [self.folder / f"rank{rank}.{kind}" for kind in ("out", "err")]
                data = b"".join(p.read_bytes() for p in parts if p.exists())
                (log_dir / f"rank{rank}.log").write_bytes(data)


def loopback_store(world_size: int) -> dist.TCPStore:
    """The rendezvous store (server side), listening on a free port of ``STORE_HOST`` only.

    Given a host, ``TCPStore`` still listens on every interface; given a socket already bound
    (``master_listen_fd``), it serves on that one and owns it: it closes the socket when it goes.
    """
    import torch.distributed as dist

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((STORE_HOST, 0))
        sock.listen(128)
        store = dist.TCPStore(
            STORE_HOST,
            sock.getsockname()[1],
            world_size,
            is_master=True,
            wait_for_workers=False,
            timeout=datetime.timedelta(minutes=10),
            master_listen_fd=sock.fileno(),
        )
    except BaseException:
        sock.close()
        raise
    sock.detach()  # the store's now: closing it here too could close another file that reused the number
    return store


def _returned(message: Mapping[str, Any]) -> Returned:
    """Rank 0's result message: its metrics, or the values of the objectives it returned."""
    if "values" in message:
        return tuple(float(v) for v in message["values"])
    return {str(k): float(v) for k, v in message["metrics"].items()}


def _query(reporter: Reporter, question: Mapping[str, Any]) -> dict[str, Any]:
    """The controller's answer to ``question``, through ``reporter.query`` (a reporter without one cannot ask)."""
    query = getattr(reporter, "query", None)
    if query is None:
        return {"error": f"{type(reporter).__name__} has no controller to ask"}
    return dict(query(question))


def _signal_groups(procs: Sequence[_Process], sig: signal.Signals) -> None:
    """Send ``sig`` to each (unreaped) rank's process group: the rank and anything it started."""
    for p in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, sig)


def _visible_id(device: int, parent_visible: str | None) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` entry for leased id ``device`` (an index into the launcher's visible set)."""
    if not parent_visible:
        return str(device)
    visible = [d.strip() for d in parent_visible.split(",") if d.strip()]
    if device >= len(visible):
        raise ValueError(f"device {device}: not in CUDA_VISIBLE_DEVICES={parent_visible!r}")
    return visible[device]
