"""Warm processes for trials and ranks: a fork server per environment that has imported torch already.

A Dask worker calls :func:`enable` (``cluster.entrypoint``); from then on :func:`start` gives the launcher of a trial
in its own process or of a data-parallel trial's ranks (:mod:`trainers.ddp`) a child of a server
(:mod:`trainers.warm_server`) instead of a fresh interpreter: the same program (``python -m MODULE ARGS``), the
same environment, working directory, ``sys.path`` and files, its own process group, in about a tenth of a second
instead of the seconds ``import torch`` and ``torch._dynamo`` take. The server has imported what the trainer's
module imports (:func:`preloads`: torch for a torch trainer, then ``torch._dynamo``), so nothing for a torch-free
one.

What keeps each process as isolated as a fresh one:

- one server per *key*: the interpreter, the working directory and the environment without the variables set per
  process (the ranks' ``RANK``... , ``CUDA_VISIBLE_DEVICES``, the launch folder), so whatever the environment
  decides at import time is what a fresh process would have decided;
- the server never initialises CUDA (checked before each fork), so each child sets its own
  ``CUDA_VISIBLE_DEVICES`` before CUDA starts in it, and has its own context, allocator and memory peak;
- a child that crashes, runs out of memory or is killed takes nothing of the server with it (it is a copy);
- the trainer's module itself is imported in each child (the server only preloads what that module imports), and
  when a user module the server loaded is edited (its file's mtime changes), the server is retired: its running
  children finish, the next process comes from a new server;
- a server ends when its worker does (:func:`shutdown`, and its stdin reaching end of file when the worker dies),
  killing the children it still has; a child whose launcher dies is killed by the server.

``HYPERSWEEP_WARM_POOL=0`` in a worker's environment: every process starts fresh, as before. A server that cannot
start (or refuses: a preloaded module initialised CUDA) makes its key start fresh processes from then on.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import functools
import importlib.util
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from trainers.ddp_rank import ENV_DIR, ENV_FD, ENV_PARENT, ENV_PICKLED, ENV_SOLO

__all__ = [
    "PoolProcess",
    "WarmServer",
    "PoolError",
    "enable",
    "enabled",
    "pooled",
    "start",
    "shutdown",
    "servers",
    "preloads",
]

ENV_SWITCH = "HYPERSWEEP_WARM_POOL"  # "0": every trial's process starts fresh
START_SECONDS = 180.0  # a server that has not said it is ready by then is given up (its key starts processes fresh)
CLOSE_SECONDS = 10.0
PER_PROCESS = frozenset(
    {
        *("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"),
        *(ENV_DIR, ENV_FD, ENV_PARENT, ENV_PICKLED, ENV_SOLO),
        *("CUDA_VISIBLE_DEVICES", "TORCHELASTIC_USE_AGENT_STORE", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"),
        "PYTHONUNBUFFERED",
    }
)
SERVER_ENV = {"PYTHONUNBUFFERED": "1", "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}  # is_available() without CUDA


class PoolError(RuntimeError):
    """The pool could not give a process (the caller starts a fresh one)."""


class PoolProcess:
    """A child of a pool's server: the part of ``subprocess.Popen`` a launcher uses (``pid``, ``poll``, ``wait``)."""

    def __init__(self, conn: socket.socket, pid: int, server: WarmServer) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._conn, self._server = conn, server

    def poll(self) -> int | None:
        return self.wait(0.0) if self.returncode is None else self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit status (negative: killed by that signal); ``None`` when still running after ``timeout``."""
        if self.returncode is not None:
            return self.returncode
        ready, _, _ = select.select([self._conn], [], [], timeout)
        if not ready:
            return None
        try:
            data = self._conn.recv(4096)
        except OSError:
            data = b""
        # no answer: the server died, and with it (killed by it, or by its own watchdog) the child
        self.returncode = int(json.loads(data)["status"]) if data else -int(signal.SIGKILL)
        self._conn.close()
        self._server.ended(self)
        return self.returncode


class WarmServer:
    """One fork server (:mod:`trainers.warm_server`) for one key, its socket, and the user files it loaded."""

    def __init__(self, env: Mapping[str, str], cwd: str) -> None:
        self.folder = tempfile.mkdtemp(prefix="hypersweep-pool-")  # 0700: only this user reaches the socket
        self.path = os.path.join(self.folder, "s")
        self.files: dict[str, int] = {}
        self.live: set[PoolProcess] = set()
        self.retired = False
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trainers.warm_server", self.path],
            env={**env, **SERVER_ENV},
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,  # a terminal's Ctrl-C is the worker's to handle, not the server's
        )
        try:
            hello = self._handshake()
        except BaseException:
            self.close()
            raise
        self.pid = int(hello["pid"])
        self.files.update(hello["files"])

    def _handshake(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], START_SECONDS)
        line = self.proc.stdout.readline() if ready else b""
        if not line:
            raise PoolError(f"the pool's server did not start (exit status {self.proc.poll()})")
        return dict(json.loads(line))

    def stale(self) -> bool:
        """Whether it has ended, or a user module it loaded was edited since (it is then retired)."""
        if self.proc.poll() is not None:
            return True
        for path, mtime in list(self.files.items()):
            try:
                if os.stat(path).st_mtime_ns != mtime:
                    return True
            except OSError:
                return True
        return False

    def spawn(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        fds: Sequence[int],
        fd_env: str = "",
        preload: Sequence[str] = (),
    ) -> PoolProcess:
        """A child running ``python -m argv[0] argv[1:]``; ``fds``: its stdout, stderr, then a channel whose number
        in the child goes to the variable ``fd_env``."""
        request = {"argv": list(argv), "env": {**env, ENV_PARENT: str(self.pid)}, "cwd": cwd, "fd_env": fd_env}
        request["preload"] = list(preload)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            conn.settimeout(START_SECONDS)
            conn.connect(self.path)
            socket.send_fds(conn, [json.dumps(request).encode()], list(fds))
            data = conn.recv(1 << 20)
            answer: dict[str, Any] = json.loads(data) if data else {"error": "the pool's server closed the connection"}
            if "error" in answer:
                raise PoolError(str(answer["error"]))
        except (OSError, ValueError) as exc:
            conn.close()
            raise PoolError(f"the pool's server gave no process ({type(exc).__name__}: {exc})") from exc
        except BaseException:
            conn.close()
            raise
        conn.settimeout(None)
        with self._lock:
            self.files.update(answer.get("files", {}))
            process = PoolProcess(conn, int(answer["pid"]), self)
            self.live.add(process)
        return process

    def ended(self, process: PoolProcess) -> None:
        with self._lock:
            self.live.discard(process)

    def idle(self) -> bool:
        with self._lock:
            return not self.live

    def close(self) -> None:
        """End the server (its stdin closed: it kills the children it still has) and remove its folder."""
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(CLOSE_SECONDS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        shutil.rmtree(self.folder, ignore_errors=True)


_LOCK = threading.Lock()
_SERVERS: dict[tuple[str, ...], WarmServer] = {}
_RETIRED: list[WarmServer] = []
_REFUSED: set[tuple[str, ...]] = set()  # keys whose server failed: their processes start fresh
_STATE = {"enabled": False, "atexit": False}


def enable() -> None:
    """Give trials' processes from the pool in this process from now on (a Dask worker calls it); the servers end
    with the process at the latest."""
    with _LOCK:
        _STATE["enabled"] = True
        if not _STATE["atexit"]:
            atexit.register(shutdown)
            _STATE["atexit"] = True


def enabled() -> bool:
    return _STATE["enabled"] and os.environ.get(ENV_SWITCH, "1") != "0"


@contextlib.contextmanager
def pooled() -> Iterator[None]:
    """Processes from the pool while the block runs (``hypersweep reproduce``: a data-parallel trial's ranks, each
    segment's, forked from one server that imported torch once), its servers ended after it; a pool already
    enabled (a Dask worker's) is left as it was. A server starts only when a process is asked for."""
    if _STATE["enabled"]:
        yield
        return
    enable()
    try:
        yield
    finally:
        shutdown()


def servers() -> list[WarmServer]:
    """The servers running now (current and retired)."""
    with _LOCK:
        return [*_SERVERS.values(), *_RETIRED]


def _key(env: Mapping[str, str], cwd: str) -> tuple[str, ...]:
    shared = sorted(f"{k}={v}" for k, v in env.items() if k not in PER_PROCESS)
    return (sys.executable, cwd, *shared)


def _server_for(env: Mapping[str, str], cwd: str) -> WarmServer | None:
    key = _key(env, cwd)
    with _LOCK:
        for old in [s for s in _RETIRED if s.idle()]:
            _RETIRED.remove(old)
            old.close()
        if key in _REFUSED:
            return None
        server = _SERVERS.get(key)
        if server is not None and server.stale():
            server.retired = True
            _RETIRED.append(_SERVERS.pop(key))
            server = None
        if server is None:
            try:
                server = _SERVERS[key] = WarmServer({k: v for k, v in env.items() if k not in PER_PROCESS}, cwd)
            except (OSError, PoolError, ValueError):
                _REFUSED.add(key)
                return None
        return server


def start(
    argv: Sequence[str],
    env: Mapping[str, str],
    fds: Sequence[int],
    fd_env: str = "",
    preload: Sequence[str] = (),
) -> PoolProcess | None:
    """A process from the pool running ``python -m argv...`` with ``env`` (see :meth:`WarmServer.spawn`), or
    ``None`` when the pool is off or cannot give one (then start it fresh)."""
    if not enabled():
        return None
    cwd = os.getcwd()
    server = _server_for(env, cwd)
    if server is None:
        return None
    try:
        return server.spawn(argv, env, cwd, fds, fd_env, preload)
    except PoolError:
        with _LOCK:
            if _SERVERS.get(_key(env, cwd)) is server:
                _REFUSED.add(_key(env, cwd))
        return None


def shutdown() -> None:
    """End every server (their children with them) and stop giving processes from the pool."""
    with _LOCK:
        _STATE["enabled"] = False
        ending = [*_SERVERS.values(), *_RETIRED]
        _SERVERS.clear()
        _RETIRED.clear()
        _REFUSED.clear()
    for server in ending:
        server.close()


def preloads(entry: str) -> tuple[str, ...]:
    """What the trainer ``entry``'s module imports, anywhere in it (at its top or inside its functions, as the
    built-in trainers import torch), and its parent packages, for a server to import before forking; not the
    module itself, which each process imports as a fresh one would. ``()`` when it cannot be read."""
    module = entry.partition(":")[0]
    if not module or module == "__main__":
        return ()
    try:
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            return ()
        package = module.rpartition(".")[0] if not spec.submodule_search_locations else module
        return _imports_of(spec.origin, os.stat(spec.origin).st_mtime_ns, module, package)
    except Exception:  # noqa: BLE001 - an optimisation: a module it cannot read is imported by its process
        return ()


_PARSE_LOCK = threading.Lock()  # CPython 3.11's ast.parse is not safe in several threads at once


@functools.lru_cache(maxsize=256)
def _imports_of(path: str, mtime_ns: int, module: str, package: str) -> tuple[str, ...]:
    with open(path, encoding="utf-8") as source, _PARSE_LOCK:
        tree = ast.parse(source.read(), path)
    found = [package.rsplit(".", i)[0] for i in range(package.count(".") + 1)] if package else []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            with contextlib.suppress(ImportError, ValueError):
                relative = "." * node.level + (node.module or "")
                found.append(importlib.util.resolve_name(relative, package) if node.level else str(node.module))
    return tuple(dict.fromkeys(m for m in found if m and m != module))
