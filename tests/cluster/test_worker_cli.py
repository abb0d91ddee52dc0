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
import pytest

from cluster.packing import MAX_TRIALS_PER_GPU
from tests.campaign_storage import load
from tests.cluster.net_probe import listening, speaks_http
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
    assert (flag(argv, "--resources"), flag(argv, "--nworkers")) == ("GPU=4", "1")
    assert flag(argv, "--nthreads") == str(4 * MAX_TRIALS_PER_GPU)  # as the trials ask: Dask's GPU=4 caps them
    capped = printed("tcp://127.0.0.1:8786", "--gpus", "4", "--trials-per-gpu", "2")
    assert flag(capped, "--nthreads") == "8"
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


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_worker_started_with_one_fake_gpu_runs_two_half_gpu_trials_at_once(tmp_path: Path) -> None:
    """``hypersweep worker --gpus 1`` on a machine without CUDA (a fake GPU: only Dask's resource): two trials of
    ``gpus = 0.5`` run at once, two of ``gpus = 1`` one after the other (Dask's resource caps the threads)."""
    from distributed import Client

    from cluster.executor import DaskExecutor, Finished, GpuPacking, Started, TrialRequest
    from cluster.packing import thread_shortfall
    from trainers.api import TrialConfig

    with scheduler(tmp_path) as (address, _file, procs):
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "search", "worker", address, "--gpus", "1", "--name", "fake-gpu"],
                env={**env(), "CUDA_VISIBLE_DEVICES": ""},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        wait_for(lambda: len(workers(address)) == 1, 60, "the worker")
        (worker,) = workers(address).values()
        assert worker["resources"] == {"GPU": 1.0} and worker["nthreads"] >= 2, worker
        assert thread_shortfall({"workers": {worker["address"]: worker}}, GpuPacking(gpus=0.5)) == []  # no warning
        spans: dict[float, list[tuple[float, float]]] = {}
        with Client(address, timeout=10) as client:
            for gpus in (0.5, 1.0):
                executor = DaskExecutor(client, f"fake-gpu-{gpus:g}", packing=GpuPacking(gpus=gpus))
                for number in range(2):
                    log_dir = str(tmp_path / f"{gpus:g}" / str(number))
                    config = TrialConfig(
                        "fake", number, {}, seed=number, epochs=1, options={"steps": 15}, log_dir=log_dir
                    )
                    executor.submit(TrialRequest(number, "gpu_trainers:visible_fit", config))
                started: dict[int, float] = {}
                ended: dict[int, float] = {}
                deadline = time.monotonic() + 60
                while len(ended) < 2 and time.monotonic() < deadline:
                    for event in executor.events(0.5):
                        if isinstance(event, Started):
                            started[event.number] = time.monotonic()
                        elif isinstance(event, Finished):
                            assert event.outcome.ok, event.outcome.error
                            ended[event.number] = time.monotonic()
                executor.close()
                assert len(ended) == 2, (started, ended)
                spans[gpus] = [(started[n], ended[n]) for n in range(2)]
    (a0, a1), (b0, b1) = sorted(spans[0.5])
    assert b0 < a1, spans  # the second half-GPU trial started before the first ended: both ran at once
    (c0, c1), (d0, d1) = sorted(spans[1.0])
    assert d0 >= c1 - 0.2, spans  # whole-GPU trials one at a time: Dask's GPU=1 caps the threads


def test_the_controller_says_when_a_gpu_worker_has_fewer_threads_than_its_gpus_hold_trials() -> None:
    """A worker started by hand with Dask's own ``dask worker --resources GPU=1`` (one thread): its scheduler record
    gives one warning line naming the worker and the fix; a worker with the threads gives none."""
    from cluster.packing import GpuPacking, thread_shortfall

    info = {
        "workers": {
            "tcp://10.0.0.7:4000": {"name": "node7", "nthreads": 1, "resources": {"GPU": 1.0}},
            "tcp://10.0.0.8:4000": {"name": "node8", "nthreads": 64, "resources": {"GPU": 1.0}},
            "tcp://10.0.0.9:4000": {"name": "cpu", "nthreads": 1, "resources": {"CPU": 1.0}},
        }
    }
    (line,) = thread_shortfall(info, GpuPacking(gpus=0.5))
    assert line.startswith("worker node7 (tcp://10.0.0.7:4000) owns GPU=1 but runs 1 thread(s)")
    assert "1 trial(s) of gpus = 0.5 at once there, not 2" in line and "--nthreads 2" in line
    assert thread_shortfall(info, GpuPacking(gpus=1.0)) == []  # whole-GPU trials: one thread per GPU is enough


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
