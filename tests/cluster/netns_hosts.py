"""Three hosts on one machine for the multi-host tests: Linux network namespaces, a TLS scheduler on one, a
``hypersweep worker`` of one slot on each of the two others, and a campaign controller beside the scheduler.

    <sched ns>  bridge hsbr0 10.213.0.1/24  -- dask scheduler (TLS), the campaign controller
       |-- veth --  <w1 ns> eth0 10.213.0.2  -- hypersweep worker --slots 1
       '-- veth --  <w2 ns> eth0 10.213.0.3  -- hypersweep worker --slots 1

:func:`campaign_on_three_hosts` starts all of it for a spec and ends every process it started.
Used by tests/cluster/test_netns_multihost.py and test_netns_wide.py.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tls_certs import make_certs

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
NET = "10.213.0"
SCHED_IP, W1_IP, W2_IP = f"{NET}.1", f"{NET}.2", f"{NET}.3"
PORT = 8786
ROLES = ("scheduler", "w1", "w2", "probe", "controller")  # the processes that write a log


def namespaces_unavailable() -> str:
    if sys.platform != "linux":
        return "network namespaces are Linux only"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    if shutil.which("openssl") is None:
        return "the openssl command is not installed (test certificates)"
    probe = f"hsprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=30)
    if made.returncode != 0:
        return f"cannot create a network namespace here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    return ""


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@contextlib.contextmanager
def three_hosts() -> Iterator[dict[str, str]]:
    """Namespaces {role: name}: the scheduler host with a bridge, two worker hosts on veth links to it."""
    tag = str(os.getpid())
    names = {"sched": f"hs{tag}s", "w1": f"hs{tag}w1", "w2": f"hs{tag}w2"}
    made: list[str] = []
    try:
        for ns in names.values():
            ip("netns", "add", ns)
            made.append(ns)
            ip("-n", ns, "link", "set", "lo", "up")
        sched = names["sched"]
        ip("-n", sched, "link", "add", "hsbr0", "type", "bridge")
        ip("-n", sched, "addr", "add", f"{SCHED_IP}/24", "dev", "hsbr0")
        ip("-n", sched, "link", "set", "hsbr0", "up")
        for role, address in (("w1", W1_IP), ("w2", W2_IP)):
            ip("-n", sched, "link", "add", f"hs-{role}", "type", "veth", "peer", "name", "eth0", "netns", names[role])
            ip("-n", sched, "link", "set", f"hs-{role}", "master", "hsbr0", "up")
            ip("-n", names[role], "addr", "add", f"{address}/24", "dev", "eth0")
            ip("-n", names[role], "link", "set", "eth0", "up")
        yield names
    finally:
        for ns in made:
            _kill_namespace_processes(ns)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)  # its links go with it


def _kill_namespace_processes(ns: str) -> None:
    """Anything still running in a namespace this test made is this test's."""
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30).stdout
    for pid in out.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def _env(host: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)]),
        "HS_TEST_HOST": host,
        "DASK_LOGGING__DISTRIBUTED": "error",
        "OMP_NUM_THREADS": "1",
        # Notice a silent worker host within seconds (the default TTL is minutes).
        "DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL": "4s",
        "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "5s",
    }


def logs_tail(logs: dict[str, Path], limit: int = 4000) -> str:
    """The end of each process's log (its stdout and stderr), for an assertion message."""
    parts = []
    for role, path in logs.items():
        text = path.read_text(errors="replace") if path.exists() else "(no log file)"
        tail = text[-limit:].rstrip() or "(empty)"
        parts.append(f"----- {role} ({path.name}), last {limit} characters -----\n{tail}")
    return "\n".join(parts)


def wait_for(
    predicate, timeout: float, what: str, procs: list[subprocess.Popen] = (), logs: dict[str, Path] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            raise AssertionError(
                f"waiting for {what}: a process exited with status {dead[0].returncode}: "
                f"{dead[0].args}\n{logs_tail(logs or {})}"
            )
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{logs_tail(logs or {})}")


def _workers_joined(ns: str, tls: list[str], log: Path) -> int:
    """The workers the scheduler has with CPU=1 (0 when it does not answer); what the probe saw goes to ``log``."""
    code = (
        "import sys; from distributed import Client; from distributed.security import Security\n"
        f"s = Security(tls_ca_file={tls[0]!r}, tls_client_cert={tls[1]!r}, tls_client_key={tls[2]!r}, "
        "require_encryption=True)\n"
        f"c = Client('tls://{SCHED_IP}:{PORT}', security=s, timeout=10)\n"
        "print(sorted(str(w['name']) + '=' + repr(w['resources']) for w in c.scheduler_info()['workers'].values()))\n"
        "c.close()\n"
    )
    try:
        out = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env=_env("probe"),
            timeout=60,
        )
    except subprocess.TimeoutExpired:  # a starved machine: the caller's deadline decides
        log.write_text("the probe did not finish within 60s\n")
        return 0
    log.write_text(f"the last probe exited {out.returncode}\nstdout: {out.stdout}\nstderr: {out.stderr}")
    return out.stdout.count("{'CPU': 1.0}") if out.returncode == 0 else 0


def _spawn(ns: str, host: str, argv: list[str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(
            ["ip", "netns", "exec", ns, *argv],
            env=_env(host),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _scheduler_argv(tls: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "distributed.cli.dask_scheduler",
        "--host",
        SCHED_IP,
        "--port",
        str(PORT),
        "--protocol",
        "tls",
        "--no-dashboard",
        "--tls-ca-file",
        tls[0],
        "--tls-cert",
        tls[1],
        "--tls-key",
        tls[2],
    ]


def _worker_argv(tls: list[str], role: str, address: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "search",
        "worker",
        f"tls://{SCHED_IP}:{PORT}",
        "--slots",
        "1",
        "--tls",
        *tls,
        "--host",
        address,
        "--name",
        role,
        "--timeout",
        "60",
    ]


def _controller_argv(tls: list[str], spec: Path, runs: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "search",
        "run",
        str(spec),
        "--scheduler",
        f"tls://{SCHED_IP}:{PORT}",
        "--tls",
        *tls,
        "--runs-dir",
        str(runs),
        "--no-progress",
    ]


@contextlib.contextmanager
def campaign_on_three_hosts(
    tmp_path: Path, spec: Path, runs: Path, logs: dict[str, Path]
) -> Iterator[tuple[dict[str, str], subprocess.Popen]]:
    """The hosts, the TLS scheduler, one worker on each worker host (joined), then ``search run spec`` beside the
    scheduler; yields (namespaces, the controller's process). Every process is killed on the way out."""
    tls = list(make_certs(tmp_path / "certs", (SCHED_IP, W1_IP, W2_IP)))
    procs: list[subprocess.Popen] = []
    with three_hosts() as ns:
        try:
            procs.append(_spawn(ns["sched"], "sched", _scheduler_argv(tls), logs["scheduler"]))
            for role, address in (("w1", W1_IP), ("w2", W2_IP)):
                procs.append(_spawn(ns[role], role, _worker_argv(tls, role, address), logs[role]))
            wait_for(
                lambda: _workers_joined(ns["sched"], tls, logs["probe"]) == 2,
                60,
                "two TLS workers, CPU=1 each",
                procs,
                logs,
            )
            controller = _spawn(ns["sched"], "controller", _controller_argv(tls, spec, runs), logs["controller"])
            procs.append(controller)
            yield ns, controller
        finally:
            for proc in procs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            for proc in procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=30)
