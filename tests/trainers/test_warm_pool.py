"""The warm pool (trainers.warm_pool): a trial's process and each rank forked from a server that imported torch,
as isolated as a fresh process. No CUDA here: ``CUDA_VISIBLE_DEVICES`` is a lease's name, and CUDA's own
initialisation is checked where it can be (torch reports none in every process)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainers import warm_pool
from trainers.api import RecordingReporter, TrialConfig
from trainers.ddp import RankError, TrialProcessError, launch, launch_solo

pytestmark = pytest.mark.slow

HELPERS = "tests.trainers.pool_trainers"


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (not a zombie), from /proc."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gone(pids: list[int], seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(_alive(p) for p in pids)


@pytest.fixture
def pool() -> Iterator[None]:
    """The pool on in this process, as on a worker; every server ends with the test."""
    warm_pool.enable()
    try:
        yield
    finally:
        servers = [s.proc.pid for s in warm_pool.servers()]
        warm_pool.shutdown()
        assert _gone(servers), servers


def _solo(entry: str, number: int = 0, log_dir: str | None = None, **options: object) -> dict[str, float]:
    config = TrialConfig("pool", number, {}, seed=3, epochs=1, options=dict(options), devices=(0,), log_dir=log_dir)
    return launch_solo(f"{HELPERS}:{entry}", config, RecordingReporter(), "1", grace=1.0)


def _server_pids() -> set[float]:
    return {float(s.pid) for s in warm_pool.servers()}


@pytest.mark.timeout(300)
def test_a_pool_process_sees_the_environment_and_sys_path_a_fresh_one_sees(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = str(tmp_path / "logs")  # a trial that keeps a log: its process's output comes to the launcher's streams
    fresh = _solo("where_fit", log_dir=logs, out=str(tmp_path / "fresh.json"))
    fresh_output = capsys.readouterr()
    warm_pool.enable()
    try:
        warm = _solo("where_fit", log_dir=logs, out=str(tmp_path / "warm.json"))
        servers = _server_pids()
    finally:
        warm_pool.shutdown()
    assert capsys.readouterr() == fresh_output  # nothing more said (a runpy warning, say) than a fresh process says
    assert fresh["parent"] == os.getpid() and warm["parent"] in servers  # fresh: the launcher's child; warm: not
    seen = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in ("fresh", "warm")}
    assert seen["warm"] == seen["fresh"]  # environment (less the launch's own folder and pids), sys.path, cwd ...
    assert seen["warm"]["visible"] == "1" and seen["warm"]["own_group"] and not seen["warm"]["cuda_initialized"]


@pytest.mark.timeout(300)
def test_the_same_seed_gives_the_same_result_from_the_pool_as_in_a_fresh_process() -> None:
    fresh = _solo("torch_fit")
    warm_pool.enable()
    try:
        warm = [_solo("torch_fit", n) for n in range(2)]
        servers = _server_pids()
    finally:
        warm_pool.shutdown()
    assert all(w["parent"] in servers for w in warm)
    assert warm[0]["loss"] == warm[1]["loss"] == fresh["loss"]
    assert fresh["dynamo"] == 0.0 and warm[0]["dynamo"] == warm[1]["dynamo"] == 1.0  # preloaded, not paid
    for i in range(3):  # torch's, numpy's and Python's unseeded generators: each process's own, as fresh ones have
        assert len({warm[0][f"unseeded{i}"], warm[1][f"unseeded{i}"], fresh[f"unseeded{i}"]}) == 3, i


@pytest.mark.timeout(300)
def test_a_crash_or_out_of_memory_error_does_not_poison_the_pool(pool: None) -> None:
    first = _solo("torch_fit")
    (server,) = _server_pids()
    expected = {
        "raise": "ValueError: boom",
        "oom": "OutOfMemoryError: CUDA out of memory",
        "kill": "killed by SIGKILL",
        "exit": "exited with status 3",
    }
    for how, error in expected.items():
        with pytest.raises(TrialProcessError, match=error):
            _solo("crash_fit", how=how)
        after = _solo("torch_fit")  # the next trial: from the same server, with the same result
        assert after["parent"] == server and after["loss"] == first["loss"], how
    assert _server_pids() == {server}


@pytest.mark.timeout(300)
def test_a_trainer_edited_between_campaigns_is_imported_again(
    pool: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    helper, trainer = tmp_path / "pool_edit_helper.py", tmp_path / "pool_edit_trainer.py"
    helper.write_text("VALUE = 1.0\n")
    trainer.write_text(
        "import os\nimport pool_edit_helper\n\nOWN = 10.0\n\n"
        "def fit(config, reporter):\n"
        "    return {'value': pool_edit_helper.VALUE + OWN, 'parent': float(os.getppid())}\n"
    )
    config = TrialConfig("pool", 0, {}, seed=0, epochs=1, devices=(0,))

    def run() -> dict[str, float]:
        return launch_solo("pool_edit_trainer:fit", config, RecordingReporter(), "0")

    def edit(path: Path, old: str, new: str) -> None:
        path.write_text(path.read_text().replace(old, new))
        later = path.stat().st_mtime + 10  # a new mtime whatever the clock's resolution (and a stale .pyc's)
        os.utime(path, (later, later))

    first = run()
    assert first["value"] == 11.0
    edit(trainer, "OWN = 10.0", "OWN = 20.0")  # the trainer's own module: each process imports it
    second = run()
    assert second["value"] == 21.0 and second["parent"] == first["parent"]
    edit(helper, "VALUE = 1.0", "VALUE = 2.0")  # a module the server preloaded: a new server
    third = run()
    assert third["value"] == 22.0 and third["parent"] != first["parent"]
    run()
    assert _gone([int(first["parent"])])  # retired and idle: ended at the next process


@pytest.mark.timeout(300)
def test_nothing_is_left_running_after_shutdown_even_a_trial_still_running() -> None:
    warm_pool.enable()
    pids: list[int] = []
    errors: list[BaseException] = []

    def run() -> None:
        config = TrialConfig("pool", 0, {}, seed=0, epochs=1, devices=(0,))
        try:
            launch_solo(f"{HELPERS}:sleep_fit", config, RecordingReporter(), "0", grace=1.0, on_start=pids.extend)
        except BaseException as exc:  # noqa: BLE001 - what the launch raised, checked below
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 120
    while not pids and time.monotonic() < deadline:
        time.sleep(0.05)
    servers = [s.proc.pid for s in warm_pool.servers()]
    assert pids and servers and _alive(pids[0])
    warm_pool.shutdown()
    thread.join(60)
    assert not thread.is_alive() and _gone(pids + servers)
    assert len(errors) == 1 and "SIGKILL" in str(errors[0])
    assert not warm_pool.servers() and not warm_pool.enabled()


@pytest.mark.timeout(300)
def test_a_two_rank_gloo_trial_takes_its_ranks_from_the_pool_with_the_same_result() -> None:
    config = TrialConfig("pool", 0, {"lr": 0.05, "batch_size": 32}, seed=7, epochs=1, device="cpu", data_parallel=2)
    fresh_pids: list[int] = []
    fresh = launch("trainers.classifier:fit", config, RecordingReporter(), on_start=fresh_pids.extend)
    pids: list[int] = []
    parents: list[int] = []

    def started(ranks: object) -> None:
        pids.extend(ranks)  # type: ignore[call-overload]
        for pid in pids:
            parents.append(int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]))

    with warm_pool.pooled():  # as `hypersweep reproduce` runs a data-parallel trial
        warm = launch("trainers.classifier:fit", config, RecordingReporter(), on_start=started)
        servers = [s.pid for s in warm_pool.servers()]
        server_procs = [s.proc.pid for s in warm_pool.servers()]
    assert len(pids) == 2 and set(parents) == set(servers) and len(servers) == 1  # both ranks from the pool
    assert not warm_pool.enabled() and not warm_pool.servers() and _gone(server_procs)  # its server ended with it
    drop = {"epoch_seconds"}
    assert {k: v for k, v in warm.items() if k not in drop} == {k: v for k, v in fresh.items() if k not in drop}
    assert _gone(pids + fresh_pids)


LAUNCHER = """
import sys
from trainers import warm_pool
from trainers.api import RecordingReporter, TrialConfig
from trainers.ddp import launch_solo

def started(pids):
    print(pids[0], warm_pool.servers()[0].proc.pid, flush=True)

warm_pool.enable()
config = TrialConfig("pool", 0, {}, seed=0, epochs=1, devices=(0,))
launch_solo("tests.trainers.pool_trainers:sleep_fit", config, RecordingReporter(), "0", on_start=started)
"""


@pytest.mark.timeout(300)
def test_a_worker_killed_outright_leaves_neither_its_server_nor_its_trials_running() -> None:
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert launcher.stdout is not None
        ready, _, _ = select.select([launcher.stdout], [], [], 180)
        assert ready, "the launcher did not start its trial"
        child, server = (int(word) for word in launcher.stdout.readline().split())
        assert _alive(child) and _alive(server)
        launcher.kill()  # no clean-up of its own: SIGKILL
        launcher.wait(30)
        assert _gone([child, server])
    finally:
        launcher.kill()
        launcher.wait(30)
        if launcher.stdout is not None:
            launcher.stdout.close()


@pytest.mark.timeout(300)
def test_a_server_where_a_preloaded_module_initialised_cuda_forks_no_more_fake_cuda(
    pool: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No CUDA here: the preloaded module fakes an initialised CUDA context (``torch.cuda.is_initialized``)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "pool_fake_cuda.py").write_text("import torch\n\ntorch.cuda.is_initialized = lambda: True\n")
    (tmp_path / "pool_cuda_trainer.py").write_text(
        "import os\nimport pool_fake_cuda\n\ndef fit(config, reporter):\n    return {'parent': float(os.getppid())}\n"
    )
    config = TrialConfig("pool", 0, {}, seed=0, epochs=1, devices=(0,))
    for _ in range(2):  # refused, then not asked again: each process starts fresh, and the trial runs
        assert launch_solo("pool_cuda_trainer:fit", config, RecordingReporter(), "0")["parent"] == os.getpid()


@pytest.mark.timeout(300)
def test_a_killed_rank_from_the_pool_fails_its_trial_and_no_rank_survives(pool: None) -> None:
    config = TrialConfig("pool", 0, {}, seed=0, epochs=1, device="cpu", data_parallel=2)
    pids: list[int] = []
    with pytest.raises(RankError, match="rank 1 of 2 was killed by SIGKILL"):
        launch(f"{HELPERS}:rank_killed_fit", config, RecordingReporter(), on_start=pids.extend, grace=1.0)
    assert len(pids) == 2 and _gone(pids)
    (server,) = _server_pids()
    assert _solo("torch_fit")["parent"] == server  # the pool goes on


def test_pooled_leaves_a_pool_already_on_as_it_was_and_starts_no_server_unasked() -> None:
    with warm_pool.pooled():
        assert warm_pool.enabled() and not warm_pool.servers()  # a server starts only when a process is asked for
    assert not warm_pool.enabled()
    warm_pool.enable()  # a worker's pool
    try:
        with warm_pool.pooled():
            pass
        assert warm_pool.enabled()  # not shut down under the worker
    finally:
        warm_pool.shutdown()
