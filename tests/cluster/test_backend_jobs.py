"""A submitted SLURM job, for real: a stand-in ``sbatch`` runs the job script here, and the worker it starts joins
with the right resources; single-host SLURM listening on loopback."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from tls_certs import make_certs

from cluster import ClusterOptions, open_cluster
from cluster.backends import (
    JobQueueBackend,
)
from cluster.errors import SettingError
from search.spec.campaign_spec import load_spec
from search.spec.table import SpecError
from tests.campaign_storage import load
from tests.cluster.backend_specs import (
    ROOT,
    TOY,
    hypersweep,
    needs_jobqueue,
    write,
)


@pytest.fixture(autouse=True)
def toy_trainers_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TOY))  # load_spec imports the trainer entry to check it


# --- a submitted job, for real: a stand-in sbatch runs the script here --------------------------

FAKE_SBATCH = """#!/bin/bash
# Stand-in for SLURM's sbatch: run the job script here, in its own process group.
dir="$(dirname "$0")"
job="$dir/job-$(date +%s%N).sh"
cp "$1" "$job"
setsid bash "$job" > "$job.log" 2>&1 < /dev/null &
echo "$!" >> "$dir/pids"
echo "Submitted batch job $!"
"""
FAKE_SCANCEL = """#!/bin/bash
kill -TERM -- "-$1" 2>/dev/null
exit 0
"""
FAKE_SINFO = """#!/bin/bash
echo "localhost|127.0.0.1"
"""
# squeue -h -t all -j ID,ID -o FORMAT: RUNNING while the job's process group lives, COMPLETED after.
FAKE_SQUEUE = """#!/bin/bash
while [ $# -gt 0 ]; do [ "$1" = -j ] && ids="$2"; shift; done
for id in ${ids//,/ }; do
    if kill -0 -- "-$id" 2>/dev/null; then echo "$id|RUNNING|N/A|None"; else echo "$id|COMPLETED|N/A|None"; fi
done
"""


@pytest.fixture
def fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fakes = (("sbatch", FAKE_SBATCH), ("scancel", FAKE_SCANCEL), ("squeue", FAKE_SQUEUE), ("sinfo", FAKE_SINFO))
    for name, text in fakes:
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TOY), str(ROOT)]))
    try:
        yield bin_dir
    finally:
        pids = bin_dir / "pids"
        for pid in pids.read_text().split() if pids.exists() else []:
            try:
                os.killpg(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.slow
@pytest.mark.timeout(90)
@needs_jobqueue
def test_a_submitted_job_joins_as_one_worker_owning_its_slots(fake_slurm: Path) -> None:
    backend = JobQueueBackend("slurm", walltime="0:10:00", cores=2, memory="2GB", start_timeout=60)
    with open_cluster(ClusterOptions(backend=backend)) as client:
        (worker,) = client.scheduler_info()["workers"].values()
        assert worker["resources"] == {"CPU": 2.0} and worker["nthreads"] == 2
        assert client.submit(lambda: os.getpid(), resources={"CPU": 2}).result(timeout=30) != os.getpid()
    assert len((fake_slurm / "pids").read_text().split()) == 1  # one job, then scancel on close


def _host_address() -> str:
    try:
        out = subprocess.run(
            ["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True, timeout=10
        ).stdout
    except OSError:
        return ""
    addresses = [line.split()[3].split("/")[0] for line in out.splitlines() if len(line.split()) > 3]
    return addresses[0] if addresses else ""


@pytest.mark.slow
@pytest.mark.timeout(120)
@needs_jobqueue
def test_a_campaign_runs_on_slurm_jobs_over_tls(tmp_path: Path, fake_slurm: Path) -> None:
    """``hypersweep run`` with backend = "slurm": the scheduler listens on this host's address with TLS."""
    import optuna

    host = _host_address()
    if not host or shutil.which("openssl") is None:
        pytest.skip("needs a non-loopback IPv4 address and openssl")
    ca, cert, key = make_certs(tmp_path / "certs", (host,))
    cluster = f"""
    [cluster]
    backend = "slurm"
    listen = "{host}"
    tls_ca_file = "{ca}"
    tls_cert_file = "{cert}"
    tls_key_file = "{key}"

    [cluster.slurm]
    walltime = "0:10:00"
    cores = 2
    memory = "2GB"
    start_timeout = 60
    """
    spec = write(tmp_path, cluster, name="slurmrun", n_trials=4)
    runs = tmp_path / "runs"
    proc = hypersweep("run", str(spec), "--runs-dir", str(runs), "--no-progress", timeout=100)
    assert proc.returncode == 0, proc.stderr
    study = load(runs / "slurmrun", "slurmrun")
    trials = study.get_trials()
    assert len(trials) == 4 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert {t.user_attrs["worker"].rsplit(":", 1)[0] for t in trials} == {f"tls://{host}"}
    (job,) = fake_slurm.glob("job-*.sh")
    assert "--tls-ca-file" in job.read_text() and "--resources CPU=2" in job.read_text()


# --- single-host SLURM: listen on loopback where the jobs run on this host -------------------------

LOOPBACK_SLURM = '[cluster]\nbackend = "slurm"\n[cluster.slurm]\nwalltime = "1:00:00"\ncores = 1\nmemory = "1GB"\n'


def test_slurm_may_listen_on_loopback_and_the_no_tls_advice_agrees(tmp_path: Path) -> None:
    """Loopback is a SLURM spec's own choice (checked against the nodes when jobs are submitted); PBS's jobs are
    taken to run elsewhere. The no-TLS refusal advises loopback only where the rule allows it."""
    from search.session.options import RunOptions
    from search.session.preflight import cluster_for

    assert load_spec(write(tmp_path, LOOPBACK_SLURM)).cluster.listen == "127.0.0.1"
    for kind, advice in (("slurm", "listen on 127.0.0.1 (where the SLURM jobs run on this host), or"), ("pbs", "")):
        table = LOOPBACK_SLURM.replace("slurm", kind).replace("[cluster]\n", '[cluster]\nlisten = "10.1.2.3"\n')
        with pytest.raises(SpecError, match="without TLS is refused") as info:
            cluster_for(load_spec(write(tmp_path, table, name=kind)), RunOptions())
        assert ("127.0.0.1" in str(info.value)) == bool(advice) and advice in str(info.value), info.value


SINFO_ELSEWHERE = """#!/bin/bash
# Stand-in for sinfo on a multi-node SLURM (none runs here): this host and a node elsewhere.
echo "localhost|127.0.0.1"
echo "node7|10.9.8.7"
"""


@needs_jobqueue
def test_loopback_is_refused_when_slurm_nodes_are_elsewhere_stand_in_sinfo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sinfo").write_text(SINFO_ELSEWHERE)
    (bin_dir / "sinfo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    backend = JobQueueBackend("slurm", walltime="1:00:00", cores=1, memory="1GB", queue="gpu")
    with pytest.raises(SettingError, match=r"partition 'gpu' has nodes on other hosts \(node7 \(10\.9\.8\.7\)\)"):
        with open_cluster(ClusterOptions(backend=backend)):
            pass


def test_a_refusal_is_the_submit_commands_own_message_in_one_line() -> None:
    from cluster.jobs import JobState, refusal_text

    error = RuntimeError(
        "Command exited with non-zero exit code.\nExit code: 1\nCommand:\nsbatch /tmp/x.sh\nstdout:\n\nstderr:\n"
        "sbatch: error: invalid partition specified: nope\nsbatch: error: Batch job submission failed\n\n"
    )
    assert refusal_text(error) == (
        "sbatch: error: invalid partition specified: nope; sbatch: error: Batch job submission failed"
    )
    assert JobState("7", "TIMEOUT").why() == "TIMEOUT, its walltime" and not JobState("7", "TIMEOUT").alive
    assert JobState("7", "RUNNING").alive and JobState("7", "FAILED").why() == "FAILED"
    # seen between its walltime's end and TIMEOUT (squeue -t all, a 1-minute job here: COMPLETING|...|TimeLimit)
    completing = JobState("7", "COMPLETING", reason="TimeLimit")
    assert completing.why() == "TIMEOUT, its walltime" and not completing.alive
    assert JobState("7", "COMPLETING", reason="None").why() == "COMPLETING"
