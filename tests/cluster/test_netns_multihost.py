"""Three hosts on one machine: Linux network namespaces, a campaign over TLS, and a worker host losing its link.

Layout (all inside namespaces this test makes; the root namespace is not touched):

    <sched ns>  bridge hsbr0 10.213.0.1/24  -- dask scheduler (TLS), the campaign controller
       |-- veth --  <w1 ns> eth0 10.213.0.2  -- hypersweep worker --slots 1
       '-- veth --  <w2 ns> eth0 10.213.0.3  -- hypersweep worker --slots 1

While worker host 1 runs a trial, its link goes down. The scheduler drops it after the
(short) worker TTL and the trial runs again on host 2; every trial ends COMPLETE once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tls_certs import make_certs

from tests.campaign_storage import load

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
NET = "10.213.0"
SCHED_IP, W1_IP, W2_IP = f"{NET}.1", f"{NET}.2", f"{NET}.3"
PORT = 8786
N_TRIALS = 4


def fit(config, reporter):  # the trainer, imported by name on the workers ("test_netns_multihost:fit")
    """Like the toy trainer, and it leaves a mark per host and trial so the test knows who runs what."""
    marks = Path(config.options["marks"])
    host = os.environ.get("HS_TEST_HOST", "unknown")
    (marks / f"{host}-{config.number}-start").touch()
    metrics: dict[str, float] = {}
    for epoch in range(1, config.epochs + 1):
        time.sleep(float(config.options["sleep"]))
        metrics = {"score": float(config.params["quality"]) * epoch / config.epochs}
        reporter.report(epoch, metrics)
    (marks / f"{host}-{config.number}-end").touch()
    return metrics


fit.accepted_params = frozenset({"quality"})  # type: ignore[attr-defined]
fit.reported_metrics = frozenset({"score"})  # type: ignore[attr-defined]

SPEC = """
[study]
name = "netns"
direction = "maximize"
metric = "score"
sampler = "random"
n_trials = {n}

[trainer]
entry = "test_netns_multihost:fit"
epochs = 4
options = {{ sleep = 0.75, marks = "{marks}" }}

[space]
quality = {{ type = "float", low = 0.0, high = 1.0 }}
"""


def _namespaces_unavailable() -> str:
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


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_campaign_across_three_hosts_survives_a_cut_link(tmp_path: Path) -> None:
    import optuna

    unavailable = _namespaces_unavailable()
    if unavailable:
        pytest.skip(unavailable)
    tls = list(make_certs(tmp_path / "certs", (SCHED_IP, W1_IP, W2_IP)))
    marks = tmp_path / "marks"
    marks.mkdir()
    spec = tmp_path / "netns.toml"
    spec.write_text(textwrap.dedent(SPEC.format(n=N_TRIALS, marks=marks)))
    runs = tmp_path / "runs"
    procs: list[subprocess.Popen] = []
    # Every process writes its stdout and stderr to a log here; a failure message ends with their tails.
    logs = {role: tmp_path / f"{role}.log" for role in ("scheduler", "w1", "w2", "probe", "controller")}
    with three_hosts() as ns:
        try:
            procs.append(
                _spawn(
                    ns["sched"],
                    "sched",
                    [
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
                    ],
                    logs["scheduler"],
                )
            )
            for role, address in (("w1", W1_IP), ("w2", W2_IP)):
                procs.append(
                    _spawn(
                        ns[role],
                        role,
                        [
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
                        ],
                        logs[role],
                    )
                )
            wait_for(
                lambda: _workers_joined(ns["sched"], tls, logs["probe"]) == 2,
                60,
                "two TLS workers, CPU=1 each",
                procs,
                logs,
            )

            controller = _spawn(
                ns["sched"],
                "controller",
                [
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
                ],
                logs["controller"],
            )
            procs.append(controller)

            def w1_busy() -> list[str]:
                started = {p.name.split("-")[1] for p in marks.glob("w1-*-start")}
                ended = {p.name.split("-")[1] for p in marks.glob("w1-*-end")}
                return sorted(started - ended)

            wait_for(lambda: bool(w1_busy()), 60, "a trial running on worker host 1", procs, logs)
            cut = w1_busy()
            ip("-n", ns["w1"], "link", "set", "eth0", "down")  # worker host 1 drops off the network mid-trial
            cut_at = time.time()

            try:
                controller.wait(timeout=90)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"the campaign did not finish within 90s\n{logs_tail(logs)}") from None
            assert controller.returncode == 0, f"the campaign exited {controller.returncode}\n{logs_tail(logs)}"
        finally:
            for proc in procs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            for proc in procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=30)

    study = load(runs / "netns", "netns")
    trials = study.get_trials()
    why = logs_tail(logs)  # the processes' own account, should an assertion below fail
    assert sorted(t.number for t in trials) == list(range(N_TRIALS)), why  # nothing counted twice, nothing lost
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials), f"{[t.state for t in trials]}\n{why}"
    by_number = {t.number: t for t in trials}
    for number in map(int, cut):
        # The trial host 1 was running when its link went down finished on host 2, after the cut.
        assert by_number[number].user_attrs["worker"].startswith(f"tls://{W2_IP}:"), (
            f"{by_number[number].user_attrs}\n{why}"
        )
        assert (marks / f"w2-{number}-end").exists(), why
        assert by_number[number].datetime_complete.timestamp() > cut_at, why
    # Nothing reported from host 1 reached the controller after the cut.
    late = [
        t.number
        for t in trials
        if t.user_attrs["worker"].startswith(f"tls://{W1_IP}:") and t.datetime_complete.timestamp() > cut_at
    ]
    assert late == [], why
