"""Safe defaults: loopback unless told otherwise, and then TLS (or an explicit --insecure).

The embedded cluster always talks mutual TLS with a key made for it alone, so a second user of the
machine who reads the scheduler's address cannot join it; nothing of it serves plain HTTP unless the
dashboard is asked for; the campaign folder is its owner's alone; a plain-TCP scheduler elsewhere
needs --insecure (which warns); and an address that is not a Dask scheduler fails within connect_timeout.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from tls_certs import make_certs

from cluster import ClusterError, ClusterOptions, TLSFiles, open_cluster
from search.store.folder import CampaignFolder, ControllerLock
from tests.campaign_storage import load
from tests.cluster.net_probe import listening, speaks_http
from tests.search.toy_specs import toy_toml

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "tests" / "search"


def tls_spec(listen: str, **tls: str) -> str:
    """3 toy trials on 2 workers of an embedded cluster listening on ``listen``, with ``tls_*`` files if given."""
    return toy_toml("tls", n_trials=3, cluster={"n_workers": 2, "listen": listen, **tls})


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(TOY), str(ROOT)])}


def hypersweep(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "search", *args], capture_output=True, text=True, env=env(), timeout=timeout
    )


def test_plain_tcp_on_a_non_loopback_address_is_refused(tmp_path: Path) -> None:
    spec = tmp_path / "open.toml"
    spec.write_text(tls_spec("0.0.0.0"))
    runs = tmp_path / "runs"
    proc = hypersweep("run", str(spec), "--runs-dir", str(runs))
    assert proc.returncode == 2, proc.stderr
    assert "without TLS is refused" in proc.stderr and "--insecure" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (runs / "tls").exists()


def test_options_refuse_half_configured_tls(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must be an existing PEM file"):
        TLSFiles(str(tmp_path / "ca.pem"), str(tmp_path / "c.pem"), str(tmp_path / "k.pem"))
    with pytest.raises(ValueError, match="uses TLS"):
        ClusterOptions(address="tls://10.0.0.1:8786")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_campaign_runs_over_tls_on_a_non_loopback_listen_address(tmp_path: Path) -> None:
    ca, cert, key = make_certs(tmp_path / "certs")
    spec = tmp_path / "tls.toml"
    spec.write_text(tls_spec("0.0.0.0", tls_ca_file=str(ca), tls_cert_file=str(cert), tls_key_file=str(key)))
    runs = tmp_path / "runs"
    proc = hypersweep("run", str(spec), "--runs-dir", str(runs), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    study = load(runs / "tls", "tls")
    trials = study.get_trials()
    assert len(trials) == 3 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert all(t.user_attrs["worker"].startswith("tls://") for t in trials)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_client_without_certificates_cannot_join_a_tls_cluster(tmp_path: Path) -> None:
    from distributed import Client

    ca, cert, key = make_certs(tmp_path / "certs")
    with open_cluster(ClusterOptions(n_workers=1, tls=TLSFiles(ca, cert, key))) as client:
        address = client.scheduler.address
        assert address.startswith("tls://127.0.0.1:")
        with pytest.raises((OSError, TimeoutError, TypeError, ValueError)):
            Client(address.replace("tls://", "tcp://"), timeout=3)


# --- the embedded cluster admits its own processes only -------------------------------------------

# 2 toy trials of 100 epochs of 1 s on 2 workers: the cluster stays up while an intruder tries to join it.
GUARDED = toy_toml("guarded", epochs=100, trainer={"options": {"sleep": 1.0}}, cluster={"n_workers": 2})

# Another process of this machine that knows the scheduler's address (from environment.json): over plain
# TCP, with a key and certificate of its own, and with its own certificate while trusting any server.
INTRUDER = """
import asyncio, ssl, sys
from distributed import Client
from distributed.comm import connect
from distributed.security import Security

address = sys.argv[1]
own = Security.temporary()

def client(target, security):
    try:
        with Client(target, security=security, timeout=5) as c:
            c.run(lambda: None)
        return "joined"
    except Exception:
        return "refused"

async def trusting_any_server():
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    tls = own.get_tls_config_for_role("client")
    import tempfile, os
    with tempfile.TemporaryDirectory() as d:
        cert, key = os.path.join(d, "c.pem"), os.path.join(d, "k.pem")
        open(cert, "w").write(tls["cert"]); open(key, "w").write(tls["key"])
        ctx.load_cert_chain(cert, key)
    try:
        comm = await asyncio.wait_for(connect(address, timeout=5, ssl_context=ctx), 10)
        await comm.write({"op": "identity", "reply": True})
        await asyncio.wait_for(comm.read(), 10)
        return "joined"
    except Exception:
        return "refused"

print(client(address.replace("tls://", "tcp://"), None), client(address, own), asyncio.run(trusting_any_server()))
"""


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_while_a_campaign_runs_no_other_process_can_join_its_cluster(tmp_path: Path) -> None:
    spec = tmp_path / "guarded.toml"
    spec.write_text(GUARDED)
    runs = tmp_path / "runs"
    folder = runs / "guarded"
    environment = folder / "environment.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "search", "run", str(spec), "--runs-dir", str(runs), "--no-progress"],
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for(lambda: environment.exists() or proc.poll() is not None, 120, "the campaign's environment.json")
        assert proc.poll() is None, proc.communicate()[1]
        # The folder is its owner's alone: the scheduler's address in it is out of other users' reach anyway.
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        address = json.loads(environment.read_text())["cluster"]["scheduler"]
        assert address.startswith("tls://127.0.0.1:")
        intruder = subprocess.run(
            [sys.executable, "-c", INTRUDER, address], capture_output=True, text=True, env=env(), timeout=120
        )
        assert intruder.returncode == 0, intruder.stderr
        assert intruder.stdout.split() == ["refused", "refused", "refused"], intruder.stdout
        # Only the cluster's TLS ports listen, on loopback: no plain-HTTP server (no dashboard was asked for).
        ports = listening(proc.pid)
        assert ports and all(ip == "127.0.0.1" for ip, _ in ports), ports
        assert not [port for ip, port in ports if speaks_http(ip, port)]
        # The cluster's key is in memory only: never written into the campaign folder.
        assert not [p for p in folder.rglob("*") if p.is_file() and b"PRIVATE KEY" in p.read_bytes()]
        assert proc.poll() is None, "the campaign ended early: the checks above ran against nothing"
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)  # stops like Ctrl-C: the cluster is closed
        try:
            proc.communicate(timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_embedded_cluster_serves_plain_http_only_with_the_dashboard() -> None:
    for dashboard in (False, True):
        with open_cluster(ClusterOptions(n_workers=1, dashboard=dashboard)) as client:
            assert client.submit(sum, [1, 2]).result(timeout=60) == 3
            ports = listening(os.getpid())
            assert ports and all(ip == "127.0.0.1" for ip, _ in ports), ports
            http_ports = [port for ip, port in ports if speaks_http(ip, port)]
            # The control (dashboard = true) shows that the check finds an HTTP server where there is one.
            assert bool(http_ports) == dashboard, (dashboard, http_ports)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_batch_systems_scheduler_serves_plain_http_only_with_the_dashboard() -> None:
    pytest.importorskip("dask_jobqueue")
    from cluster.backends import JobQueueBackend
    from cluster.jobqueue_backend import _jobqueue_cluster

    backend = JobQueueBackend(system="slurm", walltime="00:10:00", cores=1, memory="1GB")
    for dashboard in (False, True):
        cluster = _jobqueue_cluster(ClusterOptions(backend=backend, dashboard=dashboard))  # no job submitted
        try:
            ports = listening(os.getpid())
            assert ports and all(ip == "127.0.0.1" for ip, _ in ports), ports
            http_ports = [port for ip, port in ports if speaks_http(ip, port)]
            assert bool(http_ports) == dashboard, (dashboard, http_ports)
        finally:
            cluster.close()


def test_the_campaign_folder_is_private_even_when_made_by_hand(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        folder = CampaignFolder(tmp_path / "new")
        folder.create("spec")
        assert stat.S_IMODE(folder.root.stat().st_mode) == 0o700
        # A folder made before (or by hand) world-readable: a controller that takes it, resumed, makes it private.
        shared = tmp_path / "old"
        shared.mkdir(mode=0o755)
        os.chmod(shared, 0o755)
        with ControllerLock(shared / "controller.lock"):
            assert stat.S_IMODE(shared.stat().st_mode) == 0o700
    finally:
        os.umask(old)


# --- joining a scheduler ----------------------------------------------------------------------------

# 2 toy trials of 1 epoch on a scheduler given on the command line, given up on after 2 s.
JOIN = toy_toml("joined", epochs=1, cluster={"n_workers": None, "connect_timeout": 2})


def join_spec(tmp_path: Path) -> Path:
    spec = tmp_path / "joined.toml"
    spec.write_text(JOIN)
    return spec


@pytest.mark.slow
def test_plain_tcp_to_a_scheduler_elsewhere_is_refused_without_insecure(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    file = tmp_path / "scheduler.json"
    file.write_text(json.dumps({"address": "tcp://192.0.2.1:8786"}))
    for target in ("tcp://192.0.2.1:8786", str(file)):
        proc = hypersweep("run", str(join_spec(tmp_path)), "--scheduler", target, "--runs-dir", str(runs))
        assert proc.returncode == 2, proc.stderr
        assert "'tcp://192.0.2.1:8786' over plain TCP is refused" in proc.stderr and "--insecure" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
        assert not (runs / "joined").exists()
    with pytest.raises(ValueError, match="over plain TCP is refused"):
        ClusterOptions(address="tcp://node7:8786")
    assert ClusterOptions(address="tcp://localhost:8786").address  # loopback: as before


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_insecure_warns_then_tries(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    proc = hypersweep(
        "run", str(join_spec(tmp_path)), "--scheduler", "tcp://192.0.2.1:8786", "--insecure", "--runs-dir", str(runs)
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 3, proc.stderr  # nothing answers there (a documentation-only address)
    assert len(lines) == 2 and lines[0].startswith("hypersweep: warning: --insecure:"), lines
    assert "can run code as this user" in lines[0] and "cannot reach the Dask scheduler" in lines[1]


@contextlib.contextmanager
def serving(server: socket.socket | http.server.HTTPServer, loop) -> Iterator[int]:
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield (server.server_address if isinstance(server, http.server.HTTPServer) else server.getsockname())[1]
    finally:
        if isinstance(server, http.server.HTTPServer):
            server.shutdown()
            server.server_close()
        else:  # close() alone does not wake a thread blocked in accept(): shutdown() does (it then raises OSError)
            server.shutdown(socket.SHUT_RDWR)
            server.close()
        thread.join(timeout=10)
        assert not thread.is_alive(), "the server's thread did not end"


@contextlib.contextmanager
def http_server() -> Iterator[int]:
    """Python's own HTTP server: it waits for a request line that Dask's binary handshake never ends."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    server.daemon_threads = True
    with serving(server, server.serve_forever) as port:
        yield port


@contextlib.contextmanager
def blunt_server() -> Iterator[int]:
    """A server that answers HTTP at once to whatever connects, then hangs up."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()

    def loop() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = sock.accept()
                with conn:
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    with serving(sock, loop) as port:
        yield port


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_an_address_that_is_not_a_dask_scheduler_fails_within_connect_timeout(tmp_path: Path) -> None:
    cases = ((http_server, "gave no Dask answer within 2s"), (blunt_server, "answered, but not in Dask's protocol"))
    for server, message in cases:
        with server() as port:
            started = time.monotonic()
            with pytest.raises(ClusterError, match=message) as info:
                with open_cluster(ClusterOptions(address=f"tcp://127.0.0.1:{port}", connect_timeout=2)):
                    pass
            assert time.monotonic() - started < 2 + 1.0, info.value
            assert len(str(info.value).splitlines()) == 1
    # The command line: exit 3, one line, and no campaign folder left behind.
    runs = tmp_path / "runs"
    with http_server() as port:
        proc = hypersweep(
            "run",
            str(join_spec(tmp_path)),
            "--scheduler",
            f"tcp://127.0.0.1:{port}",
            "--runs-dir",
            str(runs),
            timeout=60,
        )
    assert proc.returncode == 3, proc.stderr
    warning, error = proc.stderr.strip().splitlines()  # plain TCP, even on loopback: one line of warning first
    assert warning.startswith("hypersweep: warning: the scheduler tcp://127.0.0.1:") and "any local user" in warning
    assert "gave no Dask answer within 2s" in error
    assert not (runs / "joined").exists()


def test_what_insecure_lets_through_is_named() -> None:
    # The embedded cluster is plain TCP only where asked for: off loopback, no TLS files, --insecure.
    assert not ClusterOptions().plain_local_cluster() and ClusterOptions().insecure_exposure() == ""
    assert not ClusterOptions(insecure=True).plain_local_cluster()  # loopback: TLS all the same
    assert ClusterOptions(insecure=True).insecure_exposure() == ""
    open_to_all = ClusterOptions(host="0.0.0.0", insecure=True)
    assert open_to_all.plain_local_cluster()
    assert open_to_all.insecure_exposure() == "the scheduler and workers listen on 0.0.0.0 over plain TCP"
    joined = ClusterOptions(address="tcp://192.0.2.1:8786", insecure=True)
    assert joined.insecure_exposure() == "the scheduler tcp://192.0.2.1:8786 is joined over plain TCP"


def test_joining_a_plain_tcp_scheduler_warns_in_one_line_even_on_loopback(tmp_path: Path) -> None:
    from cluster.options import plain_tcp_warning
    from cluster.worker_cli import WorkerOptions

    loopback = plain_tcp_warning("tcp://127.0.0.1:8786")
    assert "any local user can run code on its workers" in loopback and "--tls CA CERT KEY" in loopback
    assert "anyone who can reach it" in plain_tcp_warning("tcp://192.0.2.1:8786")
    assert plain_tcp_warning("tls://127.0.0.1:8786") == ""
    assert ClusterOptions(address="tcp://127.0.0.1:8786").plain_tcp_warning() == loopback
    assert ClusterOptions().plain_tcp_warning() == ""  # the embedded cluster: TLS with its own key
    assert WorkerOptions("tcp://127.0.0.1:8786", slots=1).plain_tcp_warning() == loopback
    # `hypersweep worker`: the same line on stderr, then it goes on (here: prints its command)
    proc = hypersweep("worker", "tcp://127.0.0.1:8786", "--slots", "1", "--print")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines() == [f"hypersweep: warning: {loopback}"]


def test_a_tls_key_file_readable_by_others_is_refused_as_ssh_does(tmp_path: Path) -> None:
    ca, cert, key = make_certs(tmp_path, ["127.0.0.1"])
    assert TLSFiles(ca, cert, key).key_file == key  # 0600: fine
    os.chmod(key, 0o644)
    with pytest.raises(ValueError, match=r"accessible by others \(mode 0644\).*chmod 600"):
        TLSFiles(ca, cert, key)
    os.chmod(key, 0o640)
    with pytest.raises(ValueError, match=r"mode 0640"):
        TLSFiles(ca, cert, key)
    os.chmod(key, 0o644)
    proc = hypersweep("worker", "tls://127.0.0.1:8786", "--slots", "1", "--tls", ca, cert, key, "--print")
    assert proc.returncode == 2, proc.stderr
    assert "chmod 600" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
