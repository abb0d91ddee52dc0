"""``reproduce`` on another machine, emulated here on the user's path (issue 53, point 4).

One real campaign (``hypersweep run``, 2 embedded workers) runs as "the other machine": torch's kernels forced
to its portable set (``ATEN_CPU_CAPABILITY=default``, as on a CPU without AVX2), and trial 0 loses its worker
after its second epoch, so it is retried from its checkpoint. Then ``hypersweep reproduce`` runs in a fresh
process here: with the campaign's kernels pinned it MATCHes, for the retried trial and on one core with another
``OMP_NUM_THREADS``; with this CPU's own kernels it says MISMATCH and its verdict names the capability.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import torch
from dask_processes import wait_for

from tests.campaign_storage import load
from tests.search.toy_specs import toy_toml
from tests.spec_files import write_spec

pytestmark = pytest.mark.slow

SPEC = """
[study]
name = "machines"
direction = "maximize"
metric = "val_accuracy"
sampler = "random"
seed = 5
n_trials = 2
deterministic = true

[trainer]
entry = "trainers.classifier:fit"
dataset = "digits"
epochs = 10
device = "cpu"

[space]
model = "mlp"
lr = { type = "float", low = 0.01, high = 0.1, log = true }
batch_size = 16
schedule = "warmup_cosine"
warmup = 0.1
hidden = 64

[cluster]
n_workers = 2
"""

OTHER_KERNELS = {"ATEN_CPU_CAPABILITY": "default"}  # the campaign's machine: torch's portable kernels only
HERE = str(torch.backends.cpu.get_cpu_capability())


def _reports(folder: Path, number: int) -> list[dict]:
    path = folder / "trials" / str(number) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _cli_env() -> dict[str, str]:
    """The CLI's environment: this checkout importable (``subprocess_env``'s, for a module-scoped fixture)."""
    tests = Path(__file__).resolve().parents[1]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tests), str(tests.parent), os.environ.get("PYTHONPATH", "")]),
    }


def _kill_worker_of(controller: int, address: str) -> None:
    """SIGKILL the embedded worker process listening at ``address`` (a report's ``worker``)."""
    port = int(address.rsplit(":", 1)[1])
    for child in psutil.Process(controller).children(recursive=True):
        if any(c.laddr and c.laddr.port == port for c in child.net_connections("tcp")):
            child.kill()
            return
    raise AssertionError(f"no worker process of the controller listens at {address}")


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The finished campaign's folder, run on the other kernels; trial 0 retried after its worker's loss."""
    tmp = tmp_path_factory.mktemp("machines")
    spec = write_spec(tmp / "machines.toml", SPEC)
    folder = tmp / "runs" / "machines"
    proc = subprocess.Popen(
        [sys.executable, "-m", "search", "run", str(spec), "--runs-dir", str(tmp / "runs"), "--no-progress"],
        env={**_cli_env(), **OTHER_KERNELS},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for(lambda: len(_reports(folder, 0)) >= 2, 120, "trial 0 to report 2 of its 10 epochs")
        _kill_worker_of(proc.pid, _reports(folder, 0)[-1]["worker"])
        out, _ = proc.communicate(timeout=180)
        assert proc.returncode == 0, out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    yield folder


def _reproduce(
    folder: Path, number: int, env: dict[str, str], cpus: set[int] | None = None
) -> subprocess.CompletedProcess[str]:
    """``hypersweep reproduce`` in a fresh process with ``env`` (and only ``cpus``: a machine of fewer cores)."""
    pin: Callable[[], None] | None = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    return subprocess.run(
        [sys.executable, "-m", "search", "reproduce", str(folder), str(number)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=pin,
    )


def _verdict(done: subprocess.CompletedProcess[str]) -> str:
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr


@pytest.mark.timeout(300)
def test_a_trial_retried_from_its_checkpoint_matches_on_the_campaigns_kernels(
    campaign: Path, subprocess_env: dict[str, str]
) -> None:
    trial = load(campaign, "machines").trials[0]
    assert trial.user_attrs["retries"] == 1  # it lost its worker and went on from its checkpoint
    assert len({r["worker"] for r in _reports(campaign, 0)}) == 2
    done = _reproduce(campaign, 0, {**subprocess_env, **OTHER_KERNELS})
    assert done.returncode == 0, done.stdout + done.stderr
    assert _verdict(done) == "MATCH: trial 0 reproduces its recorded metrics and history"
    assert "comparison: exact" in done.stdout
    assert "trial 0 was retried 1 time(s) from its checkpoint after losing its worker" in done.stdout
    assert "machine differs" not in done.stdout


@pytest.mark.timeout(300)
def test_one_core_and_another_omp_thread_count_still_match(campaign: Path, subprocess_env: dict[str, str]) -> None:
    """The built-in trainer sets its own intra-op threads (1): the cores and OMP_NUM_THREADS do not matter."""
    first = min(os.sched_getaffinity(0))
    env = {**subprocess_env, **OTHER_KERNELS, "OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "3"}
    done = _reproduce(campaign, 1, env, cpus={first})
    assert done.returncode == 0, done.stdout + done.stderr
    assert _verdict(done) == "MATCH: trial 1 reproduces its recorded metrics and history"
    assert "machine differs" not in done.stdout


@pytest.mark.timeout(300)
@pytest.mark.skipif(HERE == "DEFAULT", reason="this CPU runs torch's portable kernels only: no other set to compare")
def test_this_cpus_own_kernels_mismatch_and_the_verdict_names_the_capability(
    campaign: Path, subprocess_env: dict[str, str]
) -> None:
    env = {k: v for k, v in subprocess_env.items() if k != "ATEN_CPU_CAPABILITY"}
    done = _reproduce(campaign, 1, env)
    assert done.returncode == 1, done.stdout + done.stderr
    verdict = _verdict(done)
    assert verdict.startswith("MISMATCH: trial 1 does not reproduce its record"), verdict
    assert f"torch's CPU capability DEFAULT in the campaign, {HERE} here" in verdict
    assert "ATEN_CPU_CAPABILITY=default" in verdict  # what to set for the campaign's kernels


OWN_TRAINER = '''
"""A trainer of the user's own that sets no thread count: its loss is a mean over 2^20 numbers, which torch
sums in one block per intra-op thread, so its last bits follow the thread count it inherits."""
import torch


def fit(config, reporter):
    x = torch.randn(1 << 20, generator=torch.Generator().manual_seed(config.seed))
    w = 0.0
    for epoch in range(1, config.epochs + 1):
        loss = float(((x - w) ** 2).mean())
        w += config.params["lr"] * float((x - w).mean())
        reporter.report(epoch, {"loss": loss})
    return {"loss": loss}
'''

OWN_SPEC = toy_toml(
    "own-threads",
    1,
    3,
    direction="minimize",
    metric="loss",
    seed=3,
    deterministic=True,
    trainer={"entry": "threadtrain:fit", "device": "cpu"},
    space={"lr": {"type": "float", "low": 0.1, "high": 0.5}},
)


@pytest.mark.timeout(300)
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: torch's default is the workers' 1 thread")
def test_a_trainer_that_inherits_its_threads_is_reproduced_with_the_workers_count(tmp_path: Path) -> None:
    """The campaign's workers give a trial 1 intra-op thread (OMP_NUM_THREADS=1); reproduce in a shell that sets
    none would run it with one per core. It runs it with the workers' count, and says so."""
    (tmp_path / "threadtrain.py").write_text(OWN_TRAINER)
    spec = write_spec(tmp_path / "own.toml", OWN_SPEC)
    env = {k: v for k, v in _cli_env().items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    run = subprocess.run(
        [sys.executable, "-m", "search", "run", str(spec), "--runs-dir", str(tmp_path / "runs"), "--no-progress"],
        env=env,
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    done = _reproduce(tmp_path / "runs" / "own-threads", 0, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _verdict(done) == "MATCH: trial 0 reproduces its recorded metrics and history"
    assert "runs here with 1 intra-op thread, as on the campaign's workers (OMP_NUM_THREADS=1)" in done.stdout
