"""Logging where users look: the trainer's output in ``trials/<n>/stdout.log``, TensorBoard event files
per trial, MLflow only when asked for (and installed), and a progress line that redraws in place.

The campaign test runs ``python -m search run`` with an embedded LocalCluster of one worker process
with two slots, so two trials print at once from two threads of one process: where output goes wrong.
"""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest

from cluster.trial_output import STDOUT_LOG, ThreadRouter, TrialLog, make_trial_folders, route_output
from search.loop.campaign import Snapshot
from search.loop.progress import Progress
from search.spec.campaign_spec import SpecError, parse_spec
from search.spec.logs import LoggingSpec
from search.store.folder import CampaignFolder
from search.store.sinks import MLflowSink, ReportSinks, TensorBoardSink, default_tracking_uri
from search.store.tfevents import EventFileWriter, read_scalars
from trainers.rank_output import RankOutput

CHATTY = """
import sys
import time
import warnings


def fit(config, reporter):
    number = config.number
    with open(config.checkpoint_dir + "/state.txt", "w") as fh:  # into its folder, which it does not make
        fh.write(f"trial {number}")
    metrics = {}
    for epoch in range(1, config.epochs + 1):
        print(f"hello from trial {number} epoch {epoch}")
        print(f"complaint from trial {number}", file=sys.stderr)
        time.sleep(0.3)
        metrics = {"score": number + epoch / 10, "epoch": float(epoch)}
        reporter.report(epoch, metrics)
    warnings.warn(f"a warning from trial {number}")
    if number == 1:
        raise RuntimeError("trial 1 fails on purpose")
    return metrics
"""

SPEC = """
[study]
name = "chatty"
direction = "maximize"
metric = "score"
sampler = "random"
seed = 1
n_trials = 3

[trainer]
entry = "chatty:fit"
epochs = 2

[space]
quality = { type = "float", low = 0.0, high = 1.0 }

[cluster]
n_workers = 1
slots_per_worker = 2
"""


@pytest.mark.slow
@pytest.mark.timeout(360)  # a hang guard
def test_trainer_output_goes_to_its_stdout_log_and_reports_to_event_files(tmp_path: Path) -> None:
    (tmp_path / "chatty.py").write_text(CHATTY)
    (tmp_path / "chatty.toml").write_text(SPEC)
    proc = subprocess.run(
        [sys.executable, "-m", "search", "run", "chatty.toml", "--runs-dir", "runs", "--no-progress"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard only
    )
    controller = proc.stdout + proc.stderr
    trials = tmp_path / "runs" / "chatty" / "trials"
    assert (trials / "0").is_dir(), controller
    for text in ("hello from trial", "complaint from trial", "a warning from trial", "Traceback"):
        assert text not in controller, controller
    # The failure reaches the console once, as its one line in the summary's failures block (issue 48), not its log.
    told = [line.strip() for line in controller.splitlines() if "fails on purpose" in line]
    assert told == ["1x RuntimeError: trial 1 fails on purpose (trial 1: runs/chatty/trials/1/)"], controller
    for number in range(3):
        log = (trials / str(number) / STDOUT_LOG).read_text()
        assert [line for line in log.splitlines() if line.startswith("hello")] == [
            f"hello from trial {number} epoch 1",
            f"hello from trial {number} epoch 2",
        ], log
        assert log.count(f"complaint from trial {number}\n") == 2 and f"a warning from trial {number}" in log, log
        assert ("RuntimeError: trial 1 fails on purpose" in log) == (number == 1), log
        assert f"trial {number + 1}" not in log and f"trial {number - 1} " not in log, log
        assert (trials / str(number) / "state.txt").read_text() == f"trial {number}"  # its folder was there
        (events,) = (trials / str(number)).glob("events.out.tfevents.*")
        scalars = read_scalars(events)
        assert scalars["score"] == [(1, pytest.approx(number + 0.1)), (2, pytest.approx(number + 0.2))]
        assert scalars["epoch"] == [(1, 1.0), (2, 2.0)]


# --- the pieces, in this process ---------------------------------------------------------------------


def test_each_thread_writes_to_its_own_trial_log_and_the_rest_to_the_original_stream(tmp_path: Path) -> None:
    original_out, original_err = sys.stdout, sys.stderr
    barrier = threading.Barrier(2)

    def trial(number: int) -> None:
        output = route_output(str(tmp_path / str(number)), number)
        barrier.wait()  # both routed at once
        for i in range(50):
            print(f"trial {number} line {i}")
            print(f"trial {number} error {i}", file=sys.stderr)
        barrier.wait()
        output.close()

    threads = [threading.Thread(target=trial, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sys.stdout is original_out and sys.stderr is original_err  # the last trial out took the routers out
    for number in range(2):
        lines = (tmp_path / str(number) / STDOUT_LOG).read_text().splitlines()
        assert lines[0].startswith(f"=== trial {number}: started ")
        assert sorted(lines[1:]) == sorted(
            [f"trial {number} line {i}" for i in range(50)] + [f"trial {number} error {i}" for i in range(50)]
        )


def test_the_router_passes_other_threads_through_and_hands_children_the_log_file(tmp_path: Path) -> None:
    original = io.StringIO()
    log = TrialLog(tmp_path / STDOUT_LOG)
    routes = {threading.get_ident(): log}
    router = ThreadRouter(original, routes)
    router.write("mine\n")
    other = threading.Thread(target=lambda: router.write("theirs\n"))
    other.start()
    other.join()
    subprocess.run([sys.executable, "-c", "print('from a child')"], stdout=router, check=True)
    log.close()
    assert original.getvalue() == "theirs\n"
    assert (tmp_path / STDOUT_LOG).read_text() == "mine\nfrom a child\n"


def test_a_trial_that_prints_nothing_leaves_no_log_and_its_first_output_brings_the_header(tmp_path: Path) -> None:
    original = sys.stdout
    quiet = route_output(str(tmp_path / "0"), 0)
    quiet.close()
    assert not (tmp_path / "0").exists()  # no folder, no file: nothing for the slot to wait on
    chatty = route_output(str(tmp_path / "1"), 1)
    try:
        print("", end="")  # an empty write makes nothing either
        assert not (tmp_path / "1").exists()
        print("hello")
    finally:
        chatty.close()
    assert sys.stdout is original
    lines = (tmp_path / "1" / STDOUT_LOG).read_text().splitlines()
    assert lines[0].startswith("=== trial 1: started ") and lines[1:] == ["hello"]


def test_a_trials_folders_are_made_before_its_trainer_runs_and_one_that_cannot_be_is_only_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    trial = tmp_path / "runs" / "c" / "trials" / "7"  # trials/ not there yet: the path is made
    make_trial_folders({"checkpoint_dir": str(trial), "log_dir": str(trial)})
    assert trial.is_dir()
    make_trial_folders({"checkpoint_dir": str(trial), "log_dir": None})  # there already: nothing to do
    (tmp_path / "a-file").write_text("")
    make_trial_folders({"checkpoint_dir": str(tmp_path / "a-file" / "trials" / "8")})  # cannot be made here
    assert "cannot make this trial's folder here" in caplog.text


def test_output_that_cannot_reach_its_log_stays_where_it_was(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    log = TrialLog(blocked / "0" / STDOUT_LOG)
    with open(tmp_path / "terminal.txt", "w") as original:
        router = ThreadRouter(original, {threading.get_ident(): log})
        router.write("kept here\n")
        router.flush()
        original.flush()
        subprocess.run([sys.executable, "-c", "print('from a child')"], stdout=router, check=True)
    log.close()
    assert (tmp_path / "terminal.txt").read_text() == "kept here\nfrom a child\n"


def test_a_log_stops_at_its_limit_with_one_truncated_line(tmp_path: Path) -> None:
    log = TrialLog(tmp_path / STDOUT_LOG, limit=100)
    for _ in range(30):
        log.write("0123456789")
    log.close()
    data = (tmp_path / STDOUT_LOG).read_bytes()
    assert data.startswith(b"0123456789" * 10) and data.count(b"[truncated") == 1
    assert data.endswith(b"dropped]\n") and len(data) < 200
    again = TrialLog(tmp_path / STDOUT_LOG, limit=100)  # a retry of a full log adds nothing
    again.write("more")
    again.close()
    assert (tmp_path / STDOUT_LOG).read_bytes() == data


def test_rank_output_is_copied_line_by_line_with_the_rank(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    relay = RankOutput(tmp_path, 2)
    (tmp_path / "rank0.out").write_bytes(b"epoch 1\nepo")
    (tmp_path / "rank1.err").write_bytes("caf\xc3\xa9\n".encode("latin-1"))
    relay.pump()
    with open(tmp_path / "rank0.out", "ab") as fh:
        fh.write(b"ch 2\nlast, no newline")
    relay.drain()
    out, err = capsys.readouterr()
    assert out == "[rank 0] epoch 1\n[rank 0] epoch 2\n[rank 0] last, no newline\n"
    assert err == "[rank 1] café\n"


def test_event_files_are_tensorboard_records(tmp_path: Path) -> None:
    """Our reader agrees with what we write; TensorBoard's own protos (via tensorboardX, where installed) too."""
    writer = EventFileWriter(tmp_path, ".7")
    writer.add_scalars(3, {"loss": 0.25, "acc": 0.5}, wall_time=1000.0)
    writer.add_scalars(-1, {"loss": float("inf")})
    writer.close()
    assert writer.path.name.startswith("events.out.tfevents.") and writer.path.name.endswith(".7")
    assert read_scalars(writer.path) == {"loss": [(3, 0.25), (-1, float("inf"))], "acc": [(3, 0.5)]}
    event_pb2 = pytest.importorskip("tensorboardX.proto.event_pb2")
    data, events = writer.path.read_bytes(), []
    while data:
        (length,) = struct.unpack("<Q", data[:8])
        events.append(event_pb2.Event.FromString(data[12 : 12 + length]))
        data = data[16 + length :]
    assert events[0].file_version == "brain.Event:2"
    assert (events[1].step, events[1].wall_time) == (3, 1000.0)
    assert [(v.tag, v.simple_value) for v in events[1].summary.value] == [("loss", 0.25), ("acc", 0.5)]


# --- the spec ---------------------------------------------------------------------------------------


def spec_with(logging: dict[str, object]) -> dict[str, object]:
    return {
        "study": {"name": "s", "direction": "maximize", "metric": "score"},
        "space": {"quality": {"type": "float", "low": 0.0, "high": 1.0}},
        "logging": logging,
    }


def test_logging_section_defaults_and_errors() -> None:
    default = parse_spec(spec_with({}), check_trainer=False).logging
    assert (default.tensorboard, default.mlflow) == (True, False)
    assert parse_spec(spec_with({"tensorboard": False}), check_trainer=False).logging.tensorboard is False
    with pytest.raises(SpecError, match=r"logging\.tensorbord: unknown key \(did you mean 'tensorboard'\?\)"):
        parse_spec(spec_with({"tensorbord": True}), check_trainer=False)
    with pytest.raises(SpecError, match=r"logging\.mlflow: must be true or false"):
        parse_spec(spec_with({"mlflow": "yes"}), check_trainer=False)


def test_mlflow_asked_for_but_not_installed_is_one_spec_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec  # mlflow is in the [test] extra: make it look absent, as on a user's machine
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(SpecError) as info:
        parse_spec(spec_with({"mlflow": True}), "spec.toml", check_trainer=True)
    assert str(info.value) == (
        "spec.toml: logging.mlflow: needs the [mlflow] extra (mlflow not installed): pip install -e '.[mlflow]' in the "
        "hypersweep checkout, or pip install mlflow-skinny (or set mlflow = false)"
    )
    assert parse_spec(spec_with({"mlflow": True}), check_trainer=False).logging.mlflow  # reading a campaign: fine


class Broken:
    def record(self, *args: object) -> None:
        raise OSError("disk full")

    def close(self) -> None:
        pass


def test_sinks_write_event_files_when_asked_and_drop_a_failing_sink(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = CampaignFolder(tmp_path)
    off = ReportSinks.for_campaign(LoggingSpec(tensorboard=False), folder, "s")
    off.record(0, 1, {"loss": 1.0}, 1.0)
    off.close()
    assert not list(tmp_path.rglob("events.*"))
    tensorboard = TensorBoardSink(folder)
    sinks = ReportSinks([Broken(), tensorboard])  # type: ignore[list-item]
    for step in (1, 2):
        sinks.record(0, step, {"loss": 1.0 / step}, 1.0)
    sinks.record(1, 1, {"loss": 3.0}, 1.0)
    sinks.finish(0, "COMPLETE", [0.5], {})
    sinks.close()
    assert [r.getMessage() for r in caplog.records] == ["Broken stopped: OSError: disk full"]
    assert not tensorboard._writers  # every file closed
    (first,) = (tmp_path / "trials" / "0").glob("events.*")
    assert read_scalars(first) == {"loss": [(1, 1.0), (2, 0.5)]}
    assert read_scalars(next((tmp_path / "trials" / "1").glob("events.*"))) == {"loss": [(1, 3.0)]}


class FakeMlflowClient:
    """The few ``MlflowClient`` calls the sink makes, as MLflow 2 and 3 name them, recorded."""

    def __init__(self, tracking_uri: str) -> None:
        self.tracking_uri, self.calls, self.runs = tracking_uri, [], 0

    def get_experiment_by_name(self, name: str) -> None:
        return None

    def create_experiment(self, name: str) -> str:
        return f"exp-{name}"

    def create_run(self, experiment_id: str, tags: dict[str, str], run_name: str) -> types.SimpleNamespace:
        self.runs += 1
        self.calls.append(("create_run", experiment_id, run_name, tags["hypersweep.trial"]))
        return types.SimpleNamespace(info=types.SimpleNamespace(run_id=f"run{self.runs}"))

    def __getattr__(self, name: str):  # noqa: ANN204 - log_batch, set_tag, log_metric, set_terminated
        return lambda *args, **kwargs: self.calls.append((name, *args, *sorted(kwargs.items())))


def test_mlflow_sink_makes_a_run_per_trial_and_finds_it_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Against a stand-in for mlflow (not installable here): the calls, and the run kept across a resume."""
    entities = types.SimpleNamespace(Metric=lambda *a: ("metric", *a), Param=lambda *a: ("param", *a))
    monkeypatch.setitem(sys.modules, "mlflow", types.ModuleType("mlflow"))
    monkeypatch.setitem(sys.modules, "mlflow.entities", entities)
    monkeypatch.setitem(sys.modules, "mlflow.tracking", types.SimpleNamespace(MlflowClient=FakeMlflowClient))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    folder = CampaignFolder(tmp_path)
    sink = MLflowSink.open(LoggingSpec(mlflow=True), folder, "study")
    client = sink._client
    assert client.tracking_uri == default_tracking_uri(folder)
    sink.record(3, 1, {"loss": 0.5}, 10.0)
    again = MLflowSink.open(LoggingSpec(mlflow=True), folder, "study")  # a resumed controller
    again._client = client
    again.record(3, 2, {"loss": 0.25}, 11.0)
    again.finish(3, "PRUNED", None, {"lr": 0.1})
    assert client.calls == [
        ("create_run", "exp-study", "trial-3", "3"),
        ("log_batch", "run1", ("metrics", [("metric", "loss", 0.5, 10000, 1)])),
        ("log_batch", "run1", ("metrics", [("metric", "loss", 0.25, 11000, 2)])),
        ("log_batch", "run1", ("params", [("param", "lr", "0.1")])),
        ("set_tag", "run1", "hypersweep.state", "PRUNED"),
        ("set_terminated", "run1", "KILLED"),
    ]


# --- progress ---------------------------------------------------------------------------------------


def snapshot(done: int, elapsed: float) -> Snapshot:
    return Snapshot(complete=done, pruned=0, failed=0, running=1, budget=10, best=None, elapsed=elapsed)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_progress_in_a_notebook_redraws_one_line_at_a_bounded_rate() -> None:
    stream_type = type("OutStream", (io.StringIO,), {"__module__": "ipykernel.iostream"})
    stream, clock = stream_type(), FakeClock()
    progress = Progress(stream, redraw=1.0, clock=clock)
    for step in range(40):  # four redraws a second for ten seconds
        clock.now = step / 4
        progress(snapshot(step // 4, clock.now))
    progress.close()
    text = stream.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n") and "\x1b" not in text
    assert 9 <= text.count("\r") <= 12
    assert text.rstrip("\n").split("\r")[-1].startswith("[" + "#" * 21)  # the last state, drawn at close


def test_progress_in_a_log_prints_lines_at_a_bounded_rate() -> None:
    stream, clock = io.StringIO(), FakeClock()
    progress = Progress(stream, interval=10.0, redraw=1.0, clock=clock)
    for step in range(100):  # a trial finishes every 0.1 s for ten seconds
        clock.now = step / 10
        progress(snapshot(step // 10, clock.now))
    progress.close()
    lines = stream.getvalue().splitlines()
    assert 9 <= len(lines) <= 12 and "\r" not in stream.getvalue()
    assert lines[-1].startswith("[" + "#" * 21) and " 9/10 done" in lines[-1]


def fit_printing_ranks(config, reporter):  # noqa: ANN001, ANN201 - a rank of a data-parallel trial
    import os

    rank = os.environ["RANK"]
    print(f"rank {rank} says hello")
    print(f"rank {rank} complains", file=sys.stderr)
    return {"done": 1.0}


@pytest.mark.slow
@pytest.mark.timeout(240)  # a hang guard
def test_data_parallel_ranks_print_into_the_trial_log(tmp_path: Path) -> None:
    from trainers.api import RecordingReporter, TrialConfig
    from trainers.ddp import launch

    config = TrialConfig("s", 4, {}, seed=1, epochs=1, device="cpu", data_parallel=2, log_dir=str(tmp_path))
    output = route_output(config.log_dir, config.number)
    try:
        assert launch(f"{__name__}:fit_printing_ranks", config, RecordingReporter()) == {"done": 1.0}
    finally:
        output.close()
    lines = set((tmp_path / STDOUT_LOG).read_text().splitlines())
    assert {f"[rank {r}] rank {r} {what}" for r in (0, 1) for what in ("says hello", "complains")} <= lines


@pytest.mark.slow
@pytest.mark.timeout(360)  # a hang guard
def test_a_campaign_with_mlflow_makes_one_run_per_trial_with_its_steps_params_and_state(tmp_path: Path) -> None:
    mlflow = pytest.importorskip("mlflow")  # in the [test] extra, so CI runs this for real
    (tmp_path / "chatty.py").write_text(CHATTY)
    (tmp_path / "chatty.toml").write_text(SPEC + "\n[logging]\nmlflow = true\n")
    proc = subprocess.run(
        [sys.executable, "-m", "search", "run", "chatty.toml", "--runs-dir", "runs", "--no-progress"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard only
    )
    folder = tmp_path / "runs" / "chatty"
    assert (folder / "trials" / "0").is_dir(), proc.stdout + proc.stderr
    client = mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("chatty")
    runs = {r.data.tags["hypersweep.trial"]: r for r in client.search_runs([experiment.experiment_id])}
    assert sorted(runs) == ["0", "1", "2"]
    for number, run in runs.items():
        history = client.get_metric_history(run.info.run_id, "score")
        assert [(m.step, m.value) for m in history] == [
            (1, pytest.approx(int(number) + 0.1)),
            (2, pytest.approx(int(number) + 0.2)),
        ]
        assert set(run.data.params) == {"quality"}
        failed = number == "1"
        assert run.data.tags["hypersweep.state"] == ("FAIL" if failed else "COMPLETE")
        assert run.info.status == ("FAILED" if failed else "FINISHED")
        assert ("objective" in run.data.metrics) == (not failed)


def test_event_file_writers_hold_no_file_open_between_writes(tmp_path: Path) -> None:
    """A campaign with 10,000 trials in flight has as many writers: each opens its file only to write."""
    before = len(os.listdir("/proc/self/fd"))
    writers = [EventFileWriter(tmp_path / str(n), f".{n}") for n in range(50)]
    for step, writer in enumerate(writers):
        writer.add_scalars(step, {"loss": step / 2})
    assert len(os.listdir("/proc/self/fd")) == before
    assert read_scalars(writers[9].path) == {"loss": [(9, 4.5)]}


FULL_DISK = """
import sys, threading
from pathlib import Path
from cluster import trial_output

log = trial_output.TrialLog(Path("/dev/full"), header="=== trial 1 ===\\n")  # every write: ENOSPC
with trial_output._LOCK:
    trial_output._ROUTES[threading.get_ident()] = log
    trial_output._install()
print("the trial's line")
sys.__stdout__.write("done\\n")
"""


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full, a file every write to fails with ENOSPC")
def test_a_log_on_a_full_disk_neither_hangs_the_trial_nor_loses_its_output(tmp_path: Path) -> None:
    """Its warning, logged while the log is held, comes back to it through logging's last-resort handler and the
    router on sys.stderr (no handler configured, as in a worker process): it must not wait for itself, and what the
    trial prints goes to the worker's own streams instead."""
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["the trial's line", "done"]
    assert "cannot write" in done.stderr and "No space left on device" in done.stderr
