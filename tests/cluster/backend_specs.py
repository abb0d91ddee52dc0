"""What the backends' tests share: the toy spec with each [cluster] table, the command line, job-script readers."""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "tests" / "search"

needs_jobqueue = pytest.mark.skipif(
    importlib.util.find_spec("dask_jobqueue") is None, reason="pip install 'hypersweep[slurm]' to test SLURM/PBS"
)
needs_kubernetes = pytest.mark.skipif(
    importlib.util.find_spec("dask_kubernetes") is None, reason="pip install 'hypersweep[kubernetes]' to test it"
)

HEAD = """
[study]
name = "{name}"
direction = "maximize"
metric = "score"
sampler = "random"
n_trials = {n_trials}

[trainer]
entry = "toy_trainers:fit"
epochs = 2

[space]
quality = {{ type = "float", low = 0.0, high = 1.0 }}
"""

SLURM = """
[cluster]
backend = "slurm"
listen = "10.1.2.3"

[cluster.slurm]
partition = "gpu"
account = "proj42"
walltime = "02:00:00"
cores = 16
memory = "64GB"
gpus_per_job = 4
minimum_jobs = 1
maximum_jobs = 8
job_extra_directives = ["--constraint=a100"]
job_script_prologue = ["module load cuda/12.4", "source /shared/venv/bin/activate"]
"""

PBS = """
[cluster]
backend = "pbs"
listen = "10.1.2.3"

[cluster.pbs]
queue = "gpuq"
account = "proj42"
walltime = "04:00:00"
cores = 8
memory = "32GB"
gpus_per_job = 2
maximum_jobs = 4
"""

KUBERNETES = """
[cluster]
backend = "kubernetes"

[cluster.kubernetes]
image = "registry.example.org/team/hypersweep:0.1"
name = "sweep-a"
namespace = "research"
n_workers = 3
gpus_per_worker = 2
resources = { cpu = "8", memory = "32Gi" }
"""


def write(tmp_path: Path, cluster: str, name: str = "demo", n_trials: int = 4) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(textwrap.dedent(HEAD.format(name=name, n_trials=n_trials)) + textwrap.dedent(cluster))
    return path


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(TOY), str(ROOT)])}


def hypersweep(
    *args: str, timeout: float = 120, extra_env: dict[str, str] | None = None, python: str = ""
) -> subprocess.CompletedProcess[str]:
    """``python -m search ...``; ``python`` is code run first in the same interpreter (to hide a module)."""
    head = [sys.executable, "-c", f"{python}\nimport sys; from search.cli import main; sys.exit(main(sys.argv[1:]))"]
    return subprocess.run(
        [*head, *args], capture_output=True, text=True, env={**env(), **(extra_env or {})}, timeout=timeout
    )


def directives(script: str, prefix: str) -> list[str]:
    return [line[len(prefix) + 1 :].strip() for line in script.splitlines() if line.startswith(prefix + " ")]


def worker_line(script: str) -> list[str]:
    (line,) = [line for line in script.splitlines() if "distributed.cli.dask_worker" in line]
    return shlex.split(line.replace("<port>", "PORT"))


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]
