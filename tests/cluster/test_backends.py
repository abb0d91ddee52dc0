"""SLURM/PBS/Kubernetes backends: the [cluster] spec, the generated job scripts and cluster specs, bad input.

No real SLURM or Kubernetes here: the generated artefacts are checked field by field, a
jobqueue cluster object is started (nothing submitted) to show ``cluster-script`` prints what
it would submit. A submitted job, with a stand-in ``sbatch``: ``test_backend_jobs.py``.
"""

from __future__ import annotations

import dataclasses
import socket
import sys
from pathlib import Path

import pytest
import yaml

from cluster import ClusterOptions, open_cluster
from cluster.backends import (
    REGISTRY,
    AddressBackend,
    JobQueueBackend,
    KubernetesBackend,
    LocalBackend,
    backend_named,
    backend_of,
    cluster_spec_dict,
    job_script,
    submission_text,
    worker_args,
)
from cluster.errors import InvalidSetting
from cluster.packing import MAX_TRIALS_PER_GPU
from search.spec.campaign_spec import load_spec
from search.spec.table import SpecError
from tests.cluster.backend_specs import (
    KUBERNETES,
    PBS,
    SLURM,
    TOY,
    directives,
    flag,
    hypersweep,
    needs_jobqueue,
    needs_kubernetes,
    worker_line,
    write,
)


@pytest.fixture(autouse=True)
def toy_trainers_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TOY))  # load_spec imports the trainer entry to check it


# --- the spec ------------------------------------------------------------------------------------


def test_backend_defaults_stay_backward_compatible(tmp_path: Path) -> None:
    assert load_spec(write(tmp_path, "")).cluster.backend == "local"
    spec = load_spec(write(tmp_path, '[cluster]\nscheduler = "tcp://127.0.0.1:8786"\n', name="joined"))
    assert spec.cluster.backend == "address" and spec.cluster.scheduler == "tcp://127.0.0.1:8786"
    assert spec.cluster.deploy is None


def test_a_slurm_spec_becomes_a_jobqueue_backend(tmp_path: Path) -> None:
    c = load_spec(write(tmp_path, SLURM)).cluster
    assert c.deploy == JobQueueBackend(
        system="slurm",
        walltime="02:00:00",
        cores=16,
        memory="64GB",
        queue="gpu",
        account="proj42",
        gpus_per_job=4,
        processes=1,
        minimum_jobs=1,
        maximum_jobs=8,
        job_extra_directives=("--constraint=a100",),
        job_script_prologue=("module load cuda/12.4", "source /shared/venv/bin/activate"),
    )
    assert c.deploy.adaptive and c.deploy.slots == 4


@pytest.mark.parametrize(
    ("cluster", "message"),
    [
        ('[cluster]\nbackend = "slurn"\n', r"cluster\.backend: 'slurn' is not one of .*\(did you mean 'slurm'\?\)"),
        (
            '[cluster]\nbackend = "slurm"\nlisten = "10.1.2.3"\n[cluster.slurm]\ncores = 4\nmemory = "8GB"\n',
            r"cluster\.slurm\.walltime: is required",
        ),
        (
            '[cluster]\nbackend = "pbs"\nlisten = "10.1.2.3"\n[cluster.pbs]\nwalltime = "1:00:00"\ncores = 4\n',
            r"cluster\.pbs\.memory: is required",
        ),
        (
            '[cluster]\nbackend = "kubernetes"\n[cluster.kubernetes]\nn_workers = 2\n',
            r"cluster\.kubernetes\.image: is required",
        ),
        (
            '[cluster]\nbackend = "pbs"\n[cluster.pbs]\nwalltime = "1:00:00"\ncores = 4\nmemory = "8GB"\n',
            r"cluster\.listen: '127\.0\.0\.1' is loopback, but pbs workers run on other nodes",
        ),
        (
            '[cluster]\nbackend = "slurm"\nlisten = "10.1.2.3"\n[cluster.slurm]\nwalltime = "1:00:00"\ncores = 4\n'
            'memory = "8GB"\nwaltime = "2:00:00"\n',
            r"cluster\.slurm\.waltime: unknown key \(did you mean 'walltime'\?\)",
        ),
        (
            '[cluster]\nbackend = "slurm"\nlisten = "10.1.2.3"\n[cluster.slurm]\nwalltime = "two hours"\ncores = 4\n'
            'memory = "8GB"\n',
            r"cluster\.slurm\.walltime: walltime='two hours': must look like HH:MM:SS",
        ),
        (
            '[cluster]\nbackend = "slurm"\nlisten = "10.1.2.3"\n[cluster.slurm]\nwalltime = "1:00:00"\ncores = 8\n'
            'memory = "8GB"\ngpus_per_job = 2\nprocesses = 2\n',
            r"cluster\.slurm\.processes: .*must be 1 with gpus_per_job",
        ),
        (
            '[cluster]\nbackend = "pbs"\nlisten = "10.1.2.3"\n[cluster.pbs]\nwalltime = "1:00:00"\ncores = 8\n'
            'memory = "8GB"\nminimum_jobs = 3\nmaximum_jobs = 2\n',
            r"cluster\.pbs\.maximum_jobs: must be >= 3, got 2",
        ),
        (
            '[cluster]\nbackend = "slurm"\nscheduler = "tcp://10.0.0.1:8786"\n',
            r"cluster\.scheduler: backend 'slurm' starts",
        ),
        (
            '[cluster]\nbackend = "slurm"\nlisten = "10.1.2.3"\n[cluster.slurm]\nwalltime = "1:00:00"\ncores = 4\n'
            'memory = "8GB"\njob_extra_directives = "--exclusive"\n',
            r"cluster\.slurm\.job_extra_directives: must be a list",
        ),
    ],
)
def test_bad_backend_settings_are_one_spec_error(tmp_path: Path, cluster: str, message: str) -> None:
    with pytest.raises(SpecError, match=message) as info:
        load_spec(write(tmp_path, cluster))
    assert str(info.value).startswith(str(tmp_path / "demo.toml") + ": ")
    assert "\n" not in str(info.value)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_command_line_gives_one_line_and_exit_2_and_starts_nothing(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for cluster in (
        '[cluster]\nbackend = "slurn"\n',
        '[cluster]\nbackend = "slurm"\nlisten = "10.1.2.3"\n[cluster.slurm]\ncores = 4\nmemory = "8GB"\n',
        '[cluster]\nbackend = "address"\n',
    ):
        proc = hypersweep("run", str(write(tmp_path, cluster)), "--runs-dir", str(runs), "--no-progress")
        assert proc.returncode == 2, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("hypersweep: "), proc.stderr
    assert "did you mean 'slurm'" in hypersweep("check", str(write(tmp_path, '[cluster]\nbackend = "slurn"\n'))).stderr
    assert not runs.exists() or not any(runs.iterdir())


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_an_unreachable_scheduler_is_exit_3_and_leaves_no_campaign(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    spec = write(
        tmp_path, f'[cluster]\nbackend = "address"\nscheduler = "tcp://127.0.0.1:{port}"\nconnect_timeout = 2\n'
    )
    runs = tmp_path / "runs"
    proc = hypersweep("run", str(spec), "--runs-dir", str(runs), "--no-progress")
    assert proc.returncode == 3, proc.stderr
    warning, error = proc.stderr.strip().splitlines()  # a plain-TCP scheduler, loopback too: warned first
    assert warning.startswith("hypersweep: warning: the scheduler") and "cannot reach the Dask scheduler" in error
    assert not (runs / "demo").exists()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_joined_scheduler_waits_for_its_first_worker_then_exit_3_after_worker_timeout() -> None:
    """The controller may start before its workers (one job script for both): it waits for the first, bounded."""
    import threading
    import time

    from distributed import LocalCluster

    from cluster.errors import ClusterError

    with LocalCluster(n_workers=0, processes=False, dashboard_address=None, resources={"CPU": 1}) as empty:
        started = time.monotonic()
        with pytest.raises(ClusterError, match=r"no worker joined the scheduler at .* within 1s \(worker_timeout\)"):
            with open_cluster(ClusterOptions(address=empty.scheduler_address, worker_timeout=1)):
                pass
        assert time.monotonic() - started < 15
        threading.Timer(1.0, empty.scale, args=(1,)).start()  # the worker joins while the controller waits
        with open_cluster(ClusterOptions(address=empty.scheduler_address, worker_timeout=30)) as client:
            assert len(client.scheduler_info()["workers"]) == 1
    with pytest.raises(ValueError, match=r"worker_timeout=0: must be > 0"):
        ClusterOptions(address="tcp://127.0.0.1:8786", worker_timeout=0)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("backend", "cluster", "module"), [("slurm", SLURM, "dask_jobqueue"), ("kubernetes", KUBERNETES, "dask_kubernetes")]
)
@pytest.mark.slow
def test_a_missing_extra_names_the_pip_extra(tmp_path: Path, backend: str, cluster: str, module: str) -> None:
    hide = f"import sys; sys.modules[{module!r}] = None"  # import fails as if not installed
    runs = tmp_path / "runs"
    proc = hypersweep("run", str(write(tmp_path, cluster)), "--runs-dir", str(runs), "--insecure", python=hide)
    assert proc.returncode == 2, proc.stderr
    assert f"pip install -e '.[{backend}]'" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert f"pip install {module.replace('_', '-')}" in proc.stderr  # the dependency itself, as an index serves it
    assert not runs.exists() or not any(runs.iterdir())
    proc = hypersweep("cluster-script", str(write(tmp_path, cluster)), "--insecure", python=hide)
    assert proc.returncode == 2 and f"'.[{backend}]'" in proc.stderr, proc.stderr


# --- one registry of backend classes -------------------------------------------------------------


def test_the_registry_names_every_spec_backend_and_each_opens_itself() -> None:
    from search.spec.cluster import BACKENDS

    assert set(REGISTRY) == set(BACKENDS)
    slurm = JobQueueBackend("slurm", walltime="1:00:00", cores=8, memory="16GB", gpus_per_job=2)
    pbs = JobQueueBackend("pbs", walltime="1:00:00", cores=8, memory="16GB")
    kube = KubernetesBackend(image="img:1", n_workers=2)
    chosen = {
        kind: backend_named(kind, settings)
        for kind, settings in (("local", None), ("address", None), ("slurm", slurm), ("pbs", pbs), ("kubernetes", kube))
    }
    assert chosen == {
        "local": LocalBackend(),
        "address": AddressBackend(),
        "slurm": slurm,
        "pbs": pbs,
        "kubernetes": kube,
    }
    for kind, backend in chosen.items():
        assert backend.kind == kind and isinstance(backend, REGISTRY[kind])
        options = ClusterOptions(backend=backend, address="tcp://127.0.0.1:8786" if backend.joins_scheduler else "")
        line = backend.describe(options)
        assert line and "\n" not in line
    assert "GPU=2" in chosen["slurm"].describe(ClusterOptions()) and "2 worker pod(s)" in kube.describe(
        ClusterOptions()
    )
    with pytest.raises(ValueError, match="must be one of local, address, slurm, pbs, kubernetes"):
        backend_named("slurn")
    with pytest.raises(ValueError, match=r"needs its \[cluster.slurm\] settings"):
        backend_named("slurm")
    with pytest.raises(ValueError, match=r"needs its \[cluster.pbs\] settings"):
        backend_named("pbs", slurm)


def test_options_pick_the_backend_and_refuse_what_it_cannot_use() -> None:
    assert backend_of(ClusterOptions()) == LocalBackend()
    assert backend_of(ClusterOptions(address="tcp://127.0.0.1:8786")) == AddressBackend()
    with pytest.raises(ValueError, match="backend 'address' needs a scheduler address"):
        ClusterOptions(backend=AddressBackend())
    with pytest.raises(ValueError, match="a LocalBackend starts its own scheduler"):
        ClusterOptions(backend=LocalBackend(), address="tcp://127.0.0.1:8786")
    for options in (ClusterOptions(), ClusterOptions(address="tcp://127.0.0.1:8786")):
        with pytest.raises(ValueError, match="submits nothing"):
            submission_text(options)


def test_a_bad_setting_names_its_field_without_parsing_the_message() -> None:
    with pytest.raises(InvalidSetting, match="walltime='soon'") as info:
        JobQueueBackend("slurm", walltime="soon", cores=4, memory="8GB")
    assert info.value.field == "walltime" and isinstance(info.value, ValueError)
    with pytest.raises(InvalidSetting) as info:
        KubernetesBackend(image="img:1", slots_per_worker=0)
    assert info.value.field == "slots_per_worker"


@needs_jobqueue
def test_a_jobqueue_backend_submits_its_job_script() -> None:
    backend = JobQueueBackend("pbs", walltime="1:00:00", cores=4, memory="8GB")
    options = ClusterOptions(backend=backend)
    assert backend.submission(options) == submission_text(options) == job_script(options)


@needs_jobqueue
def test_a_campaigns_jobs_log_into_its_folder_unless_the_user_names_the_output(tmp_path: Path) -> None:
    logs = str(tmp_path / "runs" / "demo" / "jobs")
    slurm = JobQueueBackend("slurm", walltime="1:00:00", cores=1, memory="1GB")
    assert "--output" not in job_script(ClusterOptions(backend=slurm))  # cluster-script: sbatch's default
    script = job_script(ClusterOptions(backend=slurm, job_logs=logs))
    assert f"--output={logs}/slurm-%j.out" in directives(script, "#SBATCH")
    assert "--error" not in script  # stderr in the same file, as sbatch's default
    own = dataclasses.replace(slurm, job_extra_directives=("--output=/scratch/%j.log",))
    assert (
        directives(job_script(ClusterOptions(backend=own, job_logs=logs)), "#SBATCH")[-1] == "--output=/scratch/%j.log"
    )
    pbs = JobQueueBackend("pbs", walltime="1:00:00", cores=1, memory="1GB")
    assert {f"-o {logs}/", f"-e {logs}/"} <= set(
        directives(job_script(ClusterOptions(backend=pbs, job_logs=logs)), "#PBS")
    )


# --- generated job scripts -----------------------------------------------------------------------


@pytest.mark.slow
@needs_jobqueue
def test_slurm_job_script_field_by_field(tmp_path: Path) -> None:
    proc = hypersweep("cluster-script", str(write(tmp_path, SLURM)), "--insecure")
    assert proc.returncode == 0, proc.stderr
    script = proc.stdout
    assert script.startswith("#!/usr/bin/env bash\n")
    assert directives(script, "#SBATCH") == [
        "-J hypersweep-worker",
        "-p gpu",
        "-A proj42",
        "-n 1",
        "--cpus-per-task=16",
        "--mem=60G",
        "-t 02:00:00",
        "--constraint=a100",
        "--gres=gpu:4",
    ]
    lines = script.splitlines()
    prologue = lines.index("module load cuda/12.4")
    assert lines[prologue + 1] == "source /shared/venv/bin/activate"
    argv = worker_line(script)
    assert argv[0] == "python"  # the environment the prologue activated, not this machine's venv path
    assert argv[1:4] == ["-m", "distributed.cli.dask_worker", "tcp://10.1.2.3:PORT"]
    assert flag(argv, "--nthreads") == "4" and flag(argv, "--resources") == "GPU=4"  # one worker owns the 4 GPUs
    assert "--nanny" in argv and "--nworkers" not in argv and "--protocol" not in argv
    assert lines.index(" ".join(argv).replace("PORT", "<port>")) > prologue


@needs_jobqueue
def test_cpu_only_jobs_split_cores_into_cpu_slots() -> None:
    backend = JobQueueBackend("slurm", walltime="1:00:00", cores=8, memory="16GB", processes=2)
    script = job_script(ClusterOptions(backend=backend))
    assert not any("gres" in d for d in directives(script, "#SBATCH"))
    argv = worker_line(script)
    assert argv[0] == sys.executable  # no prologue: the python this campaign runs on (a shared file system)
    assert flag(argv, "--nthreads") == "4" and flag(argv, "--resources") == "CPU=4" and flag(argv, "--nworkers") == "2"
    assert worker_args(0, 3) == ["--nthreads", "3", "--resources", "CPU=3"]
    assert worker_args(2, 3, 1) == ["--nthreads", "2", "--resources", "GPU=2"]
    assert worker_args(2, 3) == ["--nthreads", str(2 * MAX_TRIALS_PER_GPU), "--resources", "GPU=2"]  # as trials ask


@needs_jobqueue
def test_an_explicit_gpu_directive_is_not_doubled() -> None:
    backend = JobQueueBackend(
        "slurm",
        walltime="1:00:00",
        cores=8,
        memory="16GB",
        gpus_per_job=2,
        job_extra_directives=("--gpus-per-node=a100:2",),
    )
    found = directives(job_script(ClusterOptions(backend=backend)), "#SBATCH")
    assert "--gpus-per-node=a100:2" in found and not any("gres" in d for d in found)


@pytest.mark.slow
@needs_jobqueue
def test_pbs_job_script_field_by_field(tmp_path: Path) -> None:
    proc = hypersweep("cluster-script", str(write(tmp_path, PBS)), "--insecure")
    assert proc.returncode == 0, proc.stderr
    assert directives(proc.stdout, "#PBS") == [
        "-N hypersweep-worker",
        "-q gpuq",
        "-A proj42",
        "-l select=1:ncpus=8:ngpus=2:mem=30GB",
        "-l walltime=04:00:00",
    ]
    argv = worker_line(proc.stdout)
    assert flag(argv, "--nthreads") == "2" and flag(argv, "--resources") == "GPU=2"
    assert flag(argv, "--memory-limit") == "29.80GiB"


@needs_jobqueue
def test_tls_files_reach_the_workers_command_line(tmp_path: Path) -> None:
    ca, cert, key = (tmp_path / n for n in ("ca.pem", "cert.pem", "key.pem"))
    for path in (ca, cert, key):
        path.write_text("placeholder: only the file names matter for the script\n")
    key.chmod(0o600)  # a private key readable by others is refused
    tls = f'tls_ca_file = "{ca}"\ntls_cert_file = "{cert}"\ntls_key_file = "{key}"\n'
    proc = hypersweep(
        "cluster-script", str(write(tmp_path, SLURM.replace('listen = "10.1.2.3"\n', f'listen = "10.1.2.3"\n{tls}')))
    )
    assert proc.returncode == 0, proc.stderr
    argv = worker_line(proc.stdout)
    assert argv[3] == "tls://10.1.2.3:PORT" and flag(argv, "--protocol") == "tls://"
    assert (flag(argv, "--tls-ca-file"), flag(argv, "--tls-cert"), flag(argv, "--tls-key")) == (
        str(ca),
        str(cert),
        str(key),
    )


@needs_jobqueue
@pytest.mark.timeout(60)
@pytest.mark.parametrize("system", ["slurm", "pbs"])
def test_the_printed_script_is_what_jobqueue_submits(system: str) -> None:
    """jobqueue's own ``cluster.job_script()`` of the started cluster object equals ours, address aside."""
    from cluster.jobqueue_backend import _jobqueue_cluster

    backend = JobQueueBackend(
        system,
        walltime="1:00:00",
        cores=4,
        memory="8GB",
        gpus_per_job=2,
        job_script_prologue=("export A=1",),
        job_extra_directives=("-m abe",),
    )
    options = ClusterOptions(backend=backend)
    cluster = _jobqueue_cluster(options)
    try:
        address = cluster.scheduler.address
        assert address.startswith("tcp://127.0.0.1:")
        assert cluster.job_script() == job_script(options, address)
        assert job_script(options) == cluster.job_script().replace(address, "tcp://127.0.0.1:<port>")
        assert cluster.workers == {}  # nothing submitted
    finally:
        cluster.close(timeout=10)


# --- Kubernetes ----------------------------------------------------------------------------------


@pytest.mark.slow
@needs_kubernetes
def test_kubernetes_cluster_spec_field_by_field(tmp_path: Path) -> None:
    proc = hypersweep("cluster-script", str(write(tmp_path, KUBERNETES)))
    assert proc.returncode == 0, proc.stderr
    spec = yaml.safe_load(proc.stdout)
    assert spec == cluster_spec_dict(load_spec(write(tmp_path, KUBERNETES)).cluster.deploy)
    assert (spec["apiVersion"], spec["kind"]) == ("kubernetes.dask.org/v1", "DaskCluster")
    assert spec["metadata"] == {"name": "sweep-a", "namespace": "research"}
    worker = spec["spec"]["worker"]
    assert worker["replicas"] == 3
    (container,) = worker["spec"]["containers"]
    assert container["image"] == "registry.example.org/team/hypersweep:0.1"
    args = container["args"]
    assert args[:2] == ["dask", "worker"] and flag(args, "--nthreads") == "2" and flag(args, "--resources") == "GPU=2"
    assert container["resources"] == {
        "requests": {"cpu": "8", "memory": "32Gi"},
        "limits": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"},
    }
    (scheduler,) = spec["spec"]["scheduler"]["spec"]["containers"]
    assert scheduler["image"] == container["image"] and scheduler["resources"] is None  # the scheduler needs no GPU
    assert spec["spec"]["scheduler"]["service"]["selector"]["dask.org/cluster-name"] == "sweep-a"


@needs_kubernetes
def test_cpu_only_pods_own_cpu_slots() -> None:
    spec = cluster_spec_dict(KubernetesBackend(image="img:1", n_workers=2, slots_per_worker=4))
    (container,) = spec["spec"]["worker"]["spec"]["containers"]
    assert flag(container["args"], "--resources") == "CPU=4" and flag(container["args"], "--nthreads") == "4"
    assert container["resources"] is None and "namespace" not in spec["metadata"]


@pytest.mark.slow
@pytest.mark.timeout(60)
@needs_kubernetes
def test_kubernetes_without_credentials_is_exit_3(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    empty = tmp_path / "kubeconfig"
    empty.write_text("")
    proc = hypersweep(
        "run",
        str(write(tmp_path, KUBERNETES)),
        "--runs-dir",
        str(runs),
        "--no-progress",
        extra_env={"KUBECONFIG": str(empty), "HOME": str(tmp_path)},
    )
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.startswith("hypersweep: cannot reach Kubernetes") and len(proc.stderr.strip().splitlines()) == 1
    assert not (runs / "demo").exists()


def test_local_and_address_backends_have_no_script(tmp_path: Path) -> None:
    proc = hypersweep("cluster-script", str(write(tmp_path, "")))
    assert proc.returncode == 2 and "submits nothing" in proc.stderr
