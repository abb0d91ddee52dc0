"""``hypersweep worker``: a worker started by hand joins a scheduler with the right resources and runs a campaign."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import psutil
import pytest

from tests.campaign_storage import load
from tests.search.toy_specs import toy_toml

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "tests" / "search"

# 4 toy trials on the workers started by hand (no n_workers: the campaign joins their scheduler).
SPEC = toy_toml(name="byhand", n_trials=4, trainer={"options": {"sleep": 0.2}}, cluster={"n_workers": None})


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(TOY), str(ROOT)]), "DASK_LOGGING__DISTRIBUTED": "error"}


def hypersweep(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "search", *args], capture_output=True, text=True, env=env(), timeout=timeout
    )


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def kill(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: the nanny and its worker go too
    for proc in procs:
        proc.wait(timeout=30)


@contextlib.contextmanager
def scheduler(tmp_path: Path) -> Iterator[tuple[str, Path, list[subprocess.Popen]]]:
    """``dask scheduler`` on 127.0.0.1; yields its address, scheduler file and the process list to add to."""
    file = tmp_path / "scheduler.json"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(file),
            ],
            env=env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    ]
    try:
        wait_for(lambda: file.exists() and "address" in file.read_text(), 30, "the scheduler file")
        yield json.loads(file.read_text())["address"], file, procs
    finally:
        kill(procs)


def workers(address: str) -> dict[str, dict]:
    from distributed import Client

    with Client(address, timeout=10) as client:
        return {str(w["name"]): {**w, "address": addr} for addr, w in client.scheduler_info()["workers"].items()}


def printed(*args: str) -> list[str]:
    proc = hypersweep("worker", *args, "--print")
    assert proc.returncode == 0, proc.stderr
    return shlex.split(proc.stdout)


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_the_printed_worker_command_owns_the_gpus() -> None:
    argv = printed("tcp://127.0.0.1:8786", "--gpus", "4", "--name", "node7")
    assert argv[1:4] == ["-m", "distributed.cli.dask_worker", "tcp://127.0.0.1:8786"]
    assert (flag(argv, "--nthreads"), flag(argv, "--resources"), flag(argv, "--nworkers")) == ("4", "GPU=4", "1")
    assert flag(argv, "--name") == "node7" and flag(argv, "--host") == "127.0.0.1"
    assert "--nanny" in argv and "--no-dashboard" in argv


def test_the_worker_command_carries_slots_tls_and_scheduler_files(tmp_path: Path) -> None:
    from cluster import TLSFiles
    from cluster.worker_cli import WorkerOptions, worker_command

    argv = worker_command(WorkerOptions("tcp://127.0.0.1:8786", slots=3))
    assert (flag(argv, "--nthreads"), flag(argv, "--resources")) == ("3", "CPU=3")
    pem = [tmp_path / n for n in ("ca.pem", "cert.pem", "key.pem")]
    for path in pem:
        path.write_text("-")
    pem[2].chmod(0o600)  # a private key readable by others is refused
    tls = TLSFiles(*map(str, pem))
    argv = worker_command(WorkerOptions("tls://10.9.8.7:8786", slots=1, tls=tls, host="10.9.8.6"))
    assert argv[3] == "tls://10.9.8.7:8786" and flag(argv, "--host") == "10.9.8.6"
    assert [flag(argv, f) for f in ("--tls-ca-file", "--tls-cert", "--tls-key")] == list(map(str, pem))
    # no --host: the address on the route to the scheduler, never every interface (issue 47.4)
    host = flag(worker_command(WorkerOptions("tls://10.9.8.7:8786", slots=1, tls=tls)), "--host")
    assert host and host not in ("0.0.0.0", "::", "")
    file = tmp_path / "scheduler.json"
    file.write_text(json.dumps({"address": "tcp://127.0.0.1:9999"}))
    assert worker_command(WorkerOptions(str(file), slots=1))[3] == "tcp://127.0.0.1:9999"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["tcp://10.9.8.7:8786"], "plain TCP over '10.9.8.7' is refused"),
        (["tls://10.9.8.7:8786"], "uses TLS: give --tls CA CERT KEY"),
        (["tcp://127.0.0.1:8786", "--slots", "0"], "--slots=0: must be >= 1"),
        (["example.org:8786"], "must be tcp://host:port, tls://host:port or a scheduler file"),
    ],
)
def test_bad_worker_arguments_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    proc = hypersweep("worker", *args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_insecure_warns_and_the_worker_serves_no_http_routes() -> None:
    proc = hypersweep("worker", "tcp://10.9.8.7:8786", "--slots", "1", "--insecure", "--print")
    assert proc.returncode == 0, proc.stderr
    assert shlex.split(proc.stdout)[3] == "tcp://10.9.8.7:8786"
    assert proc.stderr.startswith("hypersweep: warning: --insecure:") and len(proc.stderr.strip().splitlines()) == 1
    from cluster.worker_cli import WorkerOptions, worker_env

    assert worker_env(WorkerOptions("tcp://127.0.0.1:8786", slots=1))["DASK_DISTRIBUTED__WORKER__HTTP__ROUTES"] == "[]"


@pytest.mark.slow
def test_an_unreachable_scheduler_is_exit_3() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = hypersweep("worker", f"tcp://127.0.0.1:{port}", "--slots", "1", "--timeout", "2")
    assert proc.returncode == 3, proc.stderr
    warning, error = proc.stderr.strip().splitlines()  # a plain-TCP scheduler, loopback too: warned first
    assert warning.startswith("hypersweep: warning: the scheduler") and "cannot reach the Dask scheduler" in error


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_workers_started_by_hand_run_a_campaign(tmp_path: Path) -> None:
    with scheduler(tmp_path) as (address, file, procs):
        for name, target in (("hand-a", address), ("hand-b", str(file))):  # an address, or the scheduler file
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "search", "worker", target, "--slots", "1", "--name", name],
                    env=env(),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        wait_for(lambda: len(workers(address)) == 2, 60, "two workers")
        found = workers(address)
        assert {n: (w["resources"], w["nthreads"]) for n, w in found.items()} == {
            "hand-a": ({"CPU": 1.0}, 1),
            "hand-b": ({"CPU": 1.0}, 1),
        }
        spec = tmp_path / "byhand.toml"
        spec.write_text(SPEC)
        runs = tmp_path / "runs"
        proc = hypersweep("run", str(spec), "--scheduler", address, "--runs-dir", str(runs), "--no-progress")
        assert proc.returncode == 0, proc.stderr
        study = load(runs / "byhand", "byhand")
        trials = study.get_trials()
        assert len(trials) == 4 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
        assert {t.user_attrs["worker"] for t in trials} <= {w["address"] for w in found.values()}
        # A worker's address is Dask, but not a scheduler: one line, exit 3, not a hang.
        proc = hypersweep(
            "run",
            str(spec),
            "--scheduler",
            found["hand-a"]["address"],
            "--runs-dir",
            str(tmp_path / "wrong"),
            "--no-progress",
        )
        assert proc.returncode == 3, proc.stderr
        warning, error = proc.stderr.strip().splitlines()  # a plain-TCP scheduler, loopback too: warned first
        assert warning.startswith("hypersweep: warning: the scheduler") and "is a Dask worker, not a scheduler" in error


def test_a_scheduler_that_starts_listening_late_is_waited_for_and_a_refusal_ends_at_the_timeout() -> None:
    import threading

    from cluster import ClusterError
    from cluster.worker_cli import check_reachable

    with socket.socket() as probe:  # a free port, then nothing listens on it for a while
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def listen_later() -> None:
        time.sleep(1.0)
        server.bind(("127.0.0.1", port))
        server.listen()

    late = threading.Thread(target=listen_later)
    late.start()
    try:
        check_reachable(f"tcp://127.0.0.1:{port}", timeout=30)  # refused at first: tried again, not given up
    finally:
        late.join(timeout=10)
        server.close()
    with pytest.raises(ClusterError, match="within 0.5s"):
        check_reachable(f"tcp://127.0.0.1:{port}", timeout=0.5)


def listening(pid: int) -> list[tuple[str, int]]:
    """(ip, port) of every listening TCP socket of ``pid`` and its descendants."""
    root = psutil.Process(pid)
    found = []
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            found += [(c.laddr.ip, c.laddr.port) for c in proc.net_connections("tcp") if c.status == psutil.CONN_LISTEN]
    return found


def speaks_http(ip: str, port: int) -> bool:
    """Whether what listens at ``ip:port`` answers a plain HTTP request (a 404 too)."""
    try:
        with socket.create_connection(("127.0.0.1" if ip in ("0.0.0.0", "::") else ip, port), timeout=2) as sock:
            sock.sendall(b"GET /health HTTP/1.0\r\nHost: localhost\r\n\r\n")
            return sock.recv(5) == b"HTTP/"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_worker_started_by_hand_listens_on_its_address_only_and_serves_no_http(tmp_path: Path) -> None:
    with scheduler(tmp_path) as (address, _file, procs):
        worker = subprocess.Popen(
            [sys.executable, "-m", "search", "worker", address, "--slots", "1", "--name", "quiet"],
            env=env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        procs.append(worker)
        wait_for(lambda: "quiet" in workers(address), 60, "the worker")
        ports = listening(worker.pid)
        assert len(ports) == 2, ports  # the nanny's and the worker's Dask ports
        assert all(ip == "127.0.0.1" for ip, _ in ports), ports
        assert not [p for p in ports if speaks_http(*p)], ports
