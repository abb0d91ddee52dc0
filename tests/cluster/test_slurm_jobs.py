"""The SLURM backend on a real single-host SLURM (``.ci/slurm-up.sh``: Debian's slurm-wlm and munge, started here).

Real ``sbatch``, ``squeue`` and ``scancel``, real jobs running real Dask workers, real campaigns: jobs submitted,
trials complete and no job is left; a cancelled job and jobs whose walltime ends are replaced, the trials they cut
resumed from their checkpoints (a walltime spends no retry); a refused submission is one line with SLURM's own
message, exit 2, within seconds; Ctrl-C is 130 with the resume line. Where SLURM cannot be started (no root, no
apt) these tests skip with the reason. They share one SLURM node, so they run one at a time (one xdist group).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.campaign_storage import load
from tests.cluster.net_probe import listening

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
JOB_NAME = "hypersweep-worker"

pytestmark = pytest.mark.xdist_group("real-slurm")


@pytest.fixture(scope="session")
def slurm_host() -> str:
    """A real single-host SLURM, started by ``.ci/slurm-up.sh`` unless it runs already; skip with its reason."""
    try:
        proc = subprocess.run(
            [str(ROOT / ".ci" / "slurm-up.sh")], capture_output=True, text=True, timeout=600, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"no SLURM here: .ci/slurm-up.sh: {exc}")
    if proc.returncode != 0:
        pytest.skip(f"no SLURM here: {(proc.stderr or proc.stdout).strip()}")
    return proc.stdout.strip()


def live_jobs() -> list[str]:
    """This test suite's jobs that hold or wait for the node (a job ending, COMPLETING, is not counted)."""
    out = subprocess.run(
        ["squeue", "-h", "-n", JOB_NAME, "-t", "PD,CF,R,S", "-o", "%i"], capture_output=True, text=True, timeout=30
    )
    return out.stdout.split()


@pytest.fixture
def slurm(slurm_host: str) -> Iterator[str]:
    """The SLURM host, and no job of ours left after the test: leftovers are cancelled and fail the test."""
    assert not live_jobs(), "jobs left from before this test"
    yield slurm_host
    left = live_jobs()
    if left:
        subprocess.run(["scancel", *left], timeout=30, check=False)
    assert not left, f"jobs left running after the test: {left}"


def spec(
    tmp_path: Path,
    *,
    n_trials: int,
    epochs: int,
    sleep: float,
    slurm: str,
    study: str = "",
    memory: str = "1GB",
    options: str = "",
) -> Path:
    """The campaign's spec; ``options``: more of the trainer's options (``slurm_trainers``), as TOML key = value
    entries after a comma."""
    path = tmp_path / "spec.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            [study]
            name = "sl"
            direction = "maximize"
            metric = "score"
            sampler = "random"
            n_trials = {n_trials}
            {study}

            [trainer]
            entry = "slurm_trainers:resumable"
            epochs = {epochs}
            options = {{ sleep = {sleep}, log = "{tmp_path / "epochs.log"}"{options} }}

            [space]
            quality = {{ type = "float", low = 0.0, high = 1.0 }}

            [cluster]
            backend = "slurm"
            listen = "127.0.0.1"

            [cluster.slurm]
            cores = 1
            memory = "{memory}"
            start_timeout = 120
            """
        )
        + textwrap.dedent(slurm)
    )
    return path


def command(spec_path: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "search", "run", str(spec_path), "--runs-dir", "runs", "--no-progress", *args]


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)])}


def run(tmp_path: Path, spec_path: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(spec_path), cwd=tmp_path, env=environment(), capture_output=True, text=True, timeout=timeout
    )


def epochs_by_job(tmp_path: Path) -> list[tuple[int, int, str]]:
    path = tmp_path / "epochs.log"
    lines = path.read_text().split("\n") if path.exists() else []
    return [(int(n), int(e), job) for n, e, job in (line.split() for line in lines if line.strip())]


DASK_PORT = re.compile(r"Start (?:worker|Nanny) at:\s+'?tcp://[\d.]+:(\d+)")


def jobs_seen(tmp_path: Path) -> set[str]:
    return {job for _, _, job in epochs_by_job(tmp_path)}


def job_logs(tmp_path: Path) -> Path:
    """Where the campaign's jobs log (its folder's ``jobs/``), not the folder ``run`` was started in."""
    return tmp_path / "runs" / "sl" / "jobs"


def job_log(tmp_path: Path, job: str) -> str:
    path = job_logs(tmp_path) / f"slurm-{job}.out"
    return path.read_text() if path.exists() else ""


def job_workers() -> list[int]:
    """The pids of the Dask workers the SLURM jobs run (their nannies: ``listening`` adds the workers below)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if (
                "distributed.cli.dask_worker" in " ".join(proc.info["cmdline"] or ())
                and "SLURM_JOB_ID" in proc.environ()
            ):
                found.append(proc.info["pid"])
    return found


def wait_for(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout:g}s")
        time.sleep(0.2)


def complete_once(tmp_path: Path, n_trials: int) -> list:  # type: ignore[type-arg]
    """Every trial COMPLETE, each counted once (each number once, each of its epochs once in the ledger)."""
    import optuna

    trials = load(tmp_path / "runs" / "sl", "sl").get_trials()
    assert len(trials) == n_trials
    assert sorted(t.number for t in trials) == list(range(n_trials))
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials), [t.state for t in trials]
    return trials


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_jobs_run_the_trials_a_cancelled_job_is_replaced_and_no_job_is_left(tmp_path: Path, slurm: str) -> None:
    n_trials = 12
    path = spec(tmp_path, n_trials=n_trials, epochs=3, sleep=1.0, slurm="walltime = '00:10:00'\nminimum_jobs = 2\n")
    stderr = tmp_path / "stderr.txt"
    with stderr.open("w") as err:
        proc = subprocess.Popen(command(path), cwd=tmp_path, env=environment(), stdout=subprocess.DEVNULL, stderr=err)
        try:
            wait_for(lambda: len({job for _, _, job in epochs_by_job(tmp_path)}) == 2, 120, "epoch run on 2 jobs")
            first = epochs_by_job(tmp_path)[0][2]
            # A job's nanny and worker listen on their Dask ports and nothing else (no HTTP: cluster.no_http);
            # probing them with HTTP would put a traceback into the job logs checked below.
            ports = {port for pid in job_workers() for _ip, port in listening(pid)}
            dask_ports = {
                int(port) for job in jobs_seen(tmp_path) for port in DASK_PORT.findall(job_log(tmp_path, job))
            }
            assert ports and ports <= dask_ports, (ports, dask_ports)
            subprocess.run(["scancel", first], check=True, timeout=30)
            cancelled_at = time.time()
            assert proc.wait(timeout=240) == 0, stderr.read_text()
        finally:
            proc.kill()
    lines = stderr.read_text().splitlines()
    (ended,) = [line for line in lines if f"SLURM job {first} ended (CANCELLED" in line]
    replacement = ended.rsplit("job ", 1)[1].split()[0]
    assert ended.endswith(f"job {replacement} submitted in its place"), ended
    jobs = {job for _, _, job in epochs_by_job(tmp_path)}
    assert replacement in jobs and len(jobs) == 3, jobs  # the replacement ran trials
    complete_once(tmp_path, n_trials)
    # The job logs: the worker starting, joining, and why it left; no traceback at the end.
    for job in jobs:
        log = (job_logs(tmp_path) / f"slurm-{job}.out").read_text()
        assert "Start worker at" in log and "Registered to" in log and "Reason: signal-15" in log, log
        assert "Traceback" not in log, log
    told = next(
        line
        for line in (tmp_path / "runs" / "sl" / "campaign.log").read_text().splitlines()
        if ended.removeprefix("hypersweep: ") in line
    )
    at = datetime.datetime.strptime(told[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    print(f"scancel of job {first}: its end and replacement told {at - cancelled_at:.1f}s later")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_adaptive_jobs_grow_while_trials_wait_and_an_idle_job_is_released(tmp_path: Path, slurm: str) -> None:
    """minimum_jobs = 1, maximum_jobs = 2: the controller keeps its waiting trials itself, so the keeper scales by
    the demand it leaves on the scheduler: a second job runs trials beside the first, and once nothing waits, the
    job left idle while the last (slow) trial runs is released before the campaign ends. The release takes two
    looks of the keeper's (2 s apart: marked, then released if still idle), so the slow trial's 3 epochs of 4 s
    leave room for them on a loaded machine (with 2 s epochs, CI's load once left the job unreleased)."""
    n_trials = 8
    slurm_keys = "walltime = '00:10:00'\nminimum_jobs = 1\nmaximum_jobs = 2\n"
    sleeps = ", sleeps = " + str([1.0] * (n_trials - 1) + [4.0])  # the last trial the slow one
    path = spec(tmp_path, n_trials=n_trials, epochs=3, sleep=1.0, slurm=slurm_keys, options=sleeps)
    proc = run(tmp_path, path, timeout=100)
    assert proc.returncode == 0, proc.stderr
    order = [job for _, _, job in epochs_by_job(tmp_path)]
    first, *others = dict.fromkeys(order)
    assert len(others) == 1, order  # one more job, and no more than maximum_jobs
    # at the same time: the second job ran an epoch before the first job's last one
    assert order.index(others[0]) < len(order) - 1 - order[::-1].index(first), order
    assert "1 more SLURM job(s) submitted for waiting trials" in proc.stderr, proc.stderr
    (released,) = [line for line in proc.stderr.splitlines() if "released: no trial waits for its slots" in line]
    last = [job for number, _, job in epochs_by_job(tmp_path) if number == n_trials - 1]
    assert released.split()[3] in (first, *others) and released.split()[3] not in last, (released, last)
    complete_once(tmp_path, n_trials)


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_a_walltime_shorter_than_the_campaign_spends_no_retry_and_starts_no_trial_it_would_cut(
    tmp_path: Path, slurm: str
) -> None:
    """2 jobs of a 1-minute walltime (SLURM ends a job 60 to 90 s after its start); 3 trials of 4 epochs: trial 0 of
    100 s, trial 1 of 35 s, trial 2 of 2 s. Trial 0 starts before any duration is known and is cut by its job's
    walltime: it resumes on a replacement job from its checkpoint (its epochs left take 0.5 s each there) and spends
    no retry (max_retries = 0: it would fail). The other job runs trial 1 (until ~40 s), but not trial 2, asked
    then, which could not end before the walltime by trial 1's 35 s (it would have started there and been cut): it
    waits for a replacement job. Trial 2's own 2 s and trial 0's quick rest only shorten the test's wait after the
    cut: the rule judges trial 2 by trial 1's duration."""
    n_trials, epochs = 3, 4
    path = spec(
        tmp_path,
        n_trials=n_trials,
        epochs=epochs,
        sleep=0.0,
        options=", sleeps = [25.0, 8.75, 0.5], resumed = 0.5",
        slurm="walltime = '00:01:00'\nminimum_jobs = 2\n",
        study="max_retries = 0",
    )
    started = time.monotonic()
    proc = run(tmp_path, path, timeout=420)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    expired = [line for line in proc.stderr.splitlines() if "ended (TIMEOUT, its walltime); job" in line]
    assert len(expired) >= 2, proc.stderr  # both replaced
    trials = complete_once(tmp_path, n_trials)
    assert not [t.number for t in trials if "retries" in t.user_attrs]  # no retry spent
    runs = epochs_by_job(tmp_path)
    jobs_of = {n: {job for m, _, job in runs if m == n} for n in range(n_trials)}
    log = (tmp_path / "runs" / "sl" / "campaign.log").read_text().splitlines()
    cut = [line.split("trial ", 1)[1].split(":")[0] for line in log if "reached its walltime; sent again" in line]
    # Only trial 0 was cut (trial 2 never started where it would have been). Under load trial 0 may be cut twice:
    # its job's worker can take 20 s of a 60 s walltime to join, and the rule judges by whole trials' median.
    assert cut and set(cut) == {"0"}, cut
    assert [n for n, jobs in jobs_of.items() if len(jobs) > 1] == [0], runs
    for number in range(n_trials):  # each epoch ran once: the cut trial resumed from its checkpoint
        assert sorted(e for n, e, _ in runs if n == number) == list(range(1, epochs + 1)), runs
    # trial 2 waited for a replacement job: it ran on neither job that ran when it was asked (trial 1's, and the
    # one trial 0 started on); it may follow trial 0's quick rest on a replacement
    first_of_0 = next(job for n, _, job in runs if n == 0)
    assert not jobs_of[2] & (jobs_of[1] | {first_of_0}), runs
    jobs = {job for _, _, job in runs}
    print(
        f"walltime: {len(jobs)} jobs ran trials, {n_trials} trials, {len(cut)} cut(s) resumed, 0 retries, {took:.0f}s"
    )


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("partition = 'nope'", "invalid partition specified: nope"),
        ("memory", "Memory specification can not be satisfied"),
    ],
)
def test_a_refused_submission_is_one_line_exit_2_within_seconds(
    tmp_path: Path, slurm: str, setting: str, message: str
) -> None:
    too_much = setting == "memory"  # more than any node has
    slurm_settings = "walltime = '00:10:00'\n" + ("" if too_much else f"{setting}\n")
    path = spec(tmp_path, n_trials=2, epochs=1, sleep=0.0, slurm=slurm_settings, memory="900TB" if too_much else "1GB")
    started = time.monotonic()
    proc = run(tmp_path, path, timeout=50)
    took = time.monotonic() - started
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("hypersweep: SLURM refused the job: sbatch: error: ") and message in line, line
    assert took < 10, f"{took:.1f}s"
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_jobs_failing_before_their_worker_joins_stop_after_a_cap(tmp_path: Path, slurm: str) -> None:
    path = spec(
        tmp_path, n_trials=2, epochs=1, sleep=0.0, slurm="walltime = '00:10:00'\njob_script_prologue = ['exit 7']\n"
    )
    proc = run(tmp_path, path, timeout=50)
    assert proc.returncode == 3, proc.stderr
    last = proc.stderr.splitlines()[-1]
    assert "3 SLURM jobs in a row were refused or ended before their worker joined" in last
    assert f"check {job_logs(tmp_path)}/slurm-<job id>.out" in last, last
    assert len(list(job_logs(tmp_path).glob("slurm-*.out"))) == 3  # 3 submitted, then no more
    assert not list(tmp_path.glob("slurm-*.out"))  # none where run was started


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """This process with SIGINT ignored, as a pytest that a script started in the background (``pytest ... &``:
    a shell without job control starts it so), which every process it starts inherits."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def from_a_terminal() -> None:
    """In the child before it runs the command: Ctrl-C at its default, as a terminal's shell starts a command."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def exit_or_stacks(proc: subprocess.Popen[str], timeout: float) -> str:
    """The controller's stderr once it exits; if it has not within ``timeout`` s, fail with every thread's stack
    (``kill -USR1``, see search.cli) and the end of what it printed, so that a hang says where it waits."""
    try:
        return proc.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(2)
        proc.kill()
        err = proc.communicate(timeout=30)[1]
        raise AssertionError(f"the controller did not exit within {timeout:g}s; its stacks:\n{err[-6000:]}") from None


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_ctrl_c_exits_130_with_the_resume_line(tmp_path: Path, slurm: str) -> None:
    """Whatever this test process does with SIGINT (CI once ran this file in a pytest started in the background: its
    controller inherited SIGINT ignored, ran on past the signal and was killed with its job left), the controller
    starts as from a terminal; the test starts it from a process that ignores SIGINT, to keep it so."""
    path = spec(tmp_path, n_trials=4, epochs=20, sleep=1.0, slurm="walltime = '00:10:00'\n")
    with sigint_ignored():
        proc = subprocess.Popen(
            command(path),
            cwd=tmp_path,
            env=environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=from_a_terminal,
        )
    try:
        wait_for(lambda: bool(epochs_by_job(tmp_path)), 90, "epoch run")
        proc.send_signal(signal.SIGINT)
        err = exit_or_stacks(proc, 60)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == (
        "hypersweep: interrupted; running trials are kept: continue with 'hypersweep resume runs/sl'"
    ), err
