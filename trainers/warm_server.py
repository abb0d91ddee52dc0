"""The server of a warm process pool: ``python -m trainers.warm_server SOCKET``, started by :mod:`trainers.warm_pool`.

It imports what the rank program imports, then, before each fork, the modules the request names (what the trainer's
module imports: torch, for a torch trainer, and then ``torch._dynamo``, which the first optimizer would import: a
throwaway SGD on a CPU tensor pulls it in), and forks one child per request. A torch-free trainer's processes
do not carry torch. A child
is what ``python -m MODULE ARGS`` would have been: its own session (process group), the environment, working
directory and ``sys.path`` the request names (``sys.path`` as a fresh interpreter started with that ``PYTHONPATH``
has it), ``MODULE`` run as ``__main__``, stdin from ``/dev/null``, stdout and stderr on the files it was handed.

CUDA: the server never initialises it (``torch.cuda.is_initialized()`` is checked before every fork; a preloaded
module that initialises it makes the server refuse and exit), so each child's ``CUDA_VISIBLE_DEVICES`` is set
before CUDA starts in it, and each child has its own CUDA context, allocator and memory peak.

The protocol, on a ``SOCK_SEQPACKET`` Unix socket in a private folder (peers of another uid are refused): a
request is one JSON message with the file descriptors for stdout, stderr and any channel; the answer is
``{"pid", "files"}`` (``files``: the user modules' files newly loaded here and their mtimes, so the pool can tell
when one is edited), or ``{"error"}``; once the child exits, ``{"status"}`` (as ``Popen.returncode``). A request's
connection closed before its child exited (its launcher died) kills the child's process group.

The server ends when its stdin reaches end of file (the pool closed it, or the worker died): it kills every child's
process group still running, and removes its socket.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import runpy
import selectors
import signal
import socket
import struct
import sys
import sysconfig
import threading
import traceback
import warnings
from collections.abc import Sequence
from typing import Any

from trainers.loaded import loaded

__all__ = ["main", "BASE_MODULES", "cuda_free"]

# what the rank program imports (trainers.ddp_rank, run as __main__ in each child, so not imported here itself)
BASE_MODULES = ("ctypes", "faulthandler", "multiprocessing.connection", "cloudpickle", "trainers.api")
MAX_FDS = 8
MAX_MESSAGE = 1 << 20
REQUEST_SECONDS = 10.0  # a connection that sends no request in this time is dropped


def cuda_free() -> bool:
    """Whether no CUDA context exists in this process (torch not imported counts as none)."""
    torch = loaded("torch")
    return torch is None or not torch.cuda.is_initialized()


def _warm_torch() -> None:
    """Once torch is imported here: what the first optimizer imports (``torch._dynamo``), on the CPU, leaving torch's
    generator as found."""
    torch = sys.modules.get("torch")
    if torch is None or "torch._dynamo" in sys.modules:
        return
    state = torch.get_rng_state()
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)  # imports torch._dynamo; no CUDA
    torch.set_rng_state(state)


def _preload(modules: Sequence[str]) -> None:
    """Import each of ``modules`` here once (and ``torch._dynamo`` when torch came with them); one that fails is left
    for the child to fail on, as it would alone."""
    for name in modules:
        if name in sys.modules:
            continue
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    with contextlib.suppress(Exception):
        _warm_torch()


class _Files:
    """The files of the user's modules loaded here (not the interpreter's or installed packages'), with mtimes."""

    def __init__(self) -> None:
        paths = sysconfig.get_paths()
        self.skip = tuple(
            {os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
        )
        self.seen: dict[str, int] = {}

    def new(self) -> dict[str, int]:
        fresh: dict[str, int] = {}
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None)
            if not path or path in self.seen:
                continue
            real = os.path.realpath(path)
            self.seen[path] = 0
            if real.startswith(self.skip):
                continue
            with contextlib.suppress(OSError):
                fresh[path] = self.seen[path] = os.stat(path).st_mtime_ns
        return fresh


class _Server:
    def __init__(self, path: str) -> None:
        self.base_path = list(sys.path)  # a fresh `python -m` here: cwd first, then PYTHONPATH, then the install
        self.base_signals = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD)}
        self.files = _Files()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(path)
        self.listener.listen(64)
        self.path = path
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        self.selector.register(0, selectors.EVENT_READ, "parent")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "wake")
        self.children: dict[int, socket.socket] = {}
        self.refused = False

    def serve(self) -> None:
        while not (self.refused and not self.children):
            for key, _ in self.selector.select(timeout=1.0):
                if key.data == "parent" and not os.read(0, 4096):
                    return
                if key.data == "accept":
                    self._accept()
                elif key.data == "wake":
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake_r, 4096)
                elif isinstance(key.data, int):
                    self._hung_up(key.data)
            self._reap()

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[1]
        if uid != os.getuid():
            conn.close()
            return
        fds: list[int] = []
        try:
            conn.settimeout(REQUEST_SECONDS)
            data, fds, _, _ = socket.recv_fds(conn, MAX_MESSAGE, MAX_FDS)
            request = json.loads(data)
            _preload(request.get("preload", ()))
            if not cuda_free():
                conn.send(json.dumps({"error": "a preloaded module initialised CUDA in the pool's server"}).encode())
                conn.close()
                self._refuse()
                return
            pid = self._fork(request, fds, conn)
            conn.send(json.dumps({"pid": pid, "files": self.files.new()}).encode())
        except (OSError, ValueError) as exc:
            with contextlib.suppress(OSError):
                conn.send(json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
            conn.close()
            return
        finally:
            for fd in fds:
                os.close(fd)
        conn.setblocking(False)
        self.children[pid] = conn
        self.selector.register(conn, selectors.EVENT_READ, pid)

    def _fork(self, request: dict[str, Any], fds: list[int], conn: socket.socket) -> int:
        if threading.active_count() != 1:
            raise ValueError(f"the pool's server runs {threading.active_count()} Python threads: it may not fork")
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        gc.freeze()  # what is here now is never traversed by a child's collector, so its pages stay shared
        with warnings.catch_warnings():  # numpy's BLAS thread: fork-safe (it is stopped and restarted around fork)
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            self._child(request, fds, conn)  # never returns
        return pid

    def _child(self, request: dict[str, Any], fds: list[int], conn: socket.socket) -> None:
        code = 1
        try:
            os.setsid()
            signal.set_wakeup_fd(-1)
            for sig, handler in self.base_signals.items():
                signal.signal(sig, handler)
            os.close(self.wake_r)
            os.close(self.wake_w)
            for sock in [self.listener, conn, *self.children.values()]:
                sock.close()
            self.selector.close()
            code = _run_child(request, fds, self.base_path)
        except BaseException:  # noqa: BLE001 - the child ends here whatever happened
            with contextlib.suppress(Exception):
                traceback.print_exc()
        finally:
            os._exit(code)

    def _refuse(self) -> None:
        """Fork no more (CUDA is up here): stop listening, serve the children running, then end."""
        self.refused = True
        self.selector.unregister(self.listener)
        self.listener.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)

    def _hung_up(self, pid: int) -> None:
        """The request's connection closed (or sent something) before its child exited: the launcher is gone."""
        conn = self.children.get(pid)
        if conn is None:
            return
        with contextlib.suppress(BlockingIOError, OSError):
            if conn.recv(1):
                return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                self.selector.unregister(conn)
                with contextlib.suppress(OSError):
                    conn.setblocking(True)
                    conn.send(json.dumps({"status": os.waitstatus_to_exitcode(status)}).encode())
                conn.close()

    def close(self) -> None:
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        for pid in list(self.children):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            self.children.pop(pid).close()
        self.listener.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)


def _run_child(request: dict[str, Any], fds: list[int], base_path: list[str]) -> int:
    """In the forked child: become the process ``python -m MODULE ARGS`` would have been, run it, its exit status."""
    out, err, *rest = fds
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    for fd in (devnull, out, err):
        os.close(fd)
    env = dict(request["env"])
    if rest and request.get("fd_env"):
        env[str(request["fd_env"])] = str(rest[0])  # the channel's number in this process
    os.environ.clear()
    os.environ.update(env)
    os.chdir(request["cwd"])
    sys.path[:] = base_path
    if base_path and base_path[0] != request["cwd"]:
        sys.path[0] = request["cwd"]  # `python -m` puts its working directory first
    _reseed()
    module, *args = request["argv"]
    sys.argv = [module, *args]
    sys.modules.pop(module, None)  # preloaded as a trainer's import: `python -m` runs a copy of its own as __main__
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException:  # noqa: BLE001 - as the interpreter would: the traceback on stderr, status 1
        traceback.print_exc()
        code = 1
    with contextlib.suppress(Exception):
        threading._shutdown()  # type: ignore[attr-defined] # non-daemon threads, as at interpreter exit
    with contextlib.suppress(Exception):
        import atexit

        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return code


def _reseed() -> None:
    """Fresh unseeded generators, as a fresh process has (Python's ``random`` reseeds itself at fork): without it
    every child would draw what the server's torch and numpy generators would have drawn next."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.seed()  # a non-deterministic seed, as torch starts with
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()  # the legacy global generator, from the OS's entropy as at its import


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("python -m trainers.warm_server SOCKET: started by trainers.warm_pool only", file=sys.stderr)
        return 2
    _preload(BASE_MODULES)
    if not cuda_free():
        print("trainers.warm_server: CUDA was initialised while preloading; refusing to fork", file=sys.stderr)
        return 3
    server = _Server(args[0])
    files = server.files.new()
    sys.stdout.write(json.dumps({"pid": os.getpid(), "files": files}) + "\n")
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # the handshake is the only thing on the pool's pipe
    os.close(devnull)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve()
    except SystemExit:
        pass
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
