"""Hostile input through the command line: every case exits 2 with one stderr line naming the file (or the
argument) and the key, and leaves the file tree (the working directory, the runs folder, a campaign folder) as
it was, at ``check`` as at ``run``; read-only commands and refused resumes write nothing.

Most cases call ``search.cli.main`` in this process (the same parser, commands and error mapping, at a
fraction of an interpreter's start-up); those in ``REAL`` run the real command line, a fresh interpreter, as
does the campaign the folder cases copy and the closed-pipe case."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from optuna.storages.journal import JournalFileBackend, JournalStorage
from toy_specs import toy_toml

from search.cli import main
from tests.spec_files import write_spec

pytestmark = pytest.mark.slow  # the real command-line cases start an interpreter (optuna, torch)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

GOOD = toy_toml()


def good(old: str = "", new: str = "") -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new, 1) if old else GOOD


def hypersweep(args: list[str], cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)]), "TMPDIR": str(cwd.parent / "tmp")}
    (cwd.parent / "tmp").mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "search", *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=timeout
    )


Hypersweep = Callable[..., subprocess.CompletedProcess]
# Cases that run the real command line (a fresh interpreter): one of each kind, and the trainer that raises
# on import (its traceback goes to a file in TMPDIR, and its import must leave no __pycache__).
REAL = {"not UTF-8", "a trainer that raises on import", "--workers 0", "resume under a changed spec"}


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Hypersweep:
    """``hypersweep ARGS`` in ``cwd``: ``search.cli.main`` in this process, or with ``real=True`` the real command
    line; either way its exit status and output as a CompletedProcess."""

    def call(args: list[str], cwd: Path, timeout: float = 120, real: bool = False) -> subprocess.CompletedProcess:
        if real:
            return hypersweep(args, cwd, timeout)
        (cwd.parent / "tmp").mkdir(exist_ok=True)
        monkeypatch.chdir(cwd)
        monkeypatch.setattr(tempfile, "tempdir", str(cwd.parent / "tmp"))
        monkeypatch.setattr(sys, "dont_write_bytecode", sys.dont_write_bytecode)  # main sets it
        monkeypatch.setenv("DASK_LOGGING__DISTRIBUTED", os.environ.get("DASK_LOGGING__DISTRIBUTED", "error"))
        sigterm = signal.getsignal(signal.SIGTERM)
        capsys.readouterr()
        try:
            code = main(args)
        except SystemExit as exc:  # argparse's own refusals
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            signal.signal(signal.SIGTERM, sigterm)
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out, err)

    return call


def tree(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``root`` with its size, modification time and mode: any write shows."""
    out = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        out[str(path.relative_to(root))] = (info.st_size, info.st_mtime_ns, info.st_mode)
    return out


def the_line(proc: subprocess.CompletedProcess, listing: bool = False) -> str:
    """The one stderr line (exit 2, no traceback, nothing else on stderr); ``listing``: a refusal that lists what
    it refused, one item a line, as git does (a changed spec's changes), returned whole."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert lines and lines[0].startswith("hypersweep: ") and "Traceback" not in proc.stderr, proc.stderr
    assert listing or len(lines) == 1, proc.stderr
    assert all(len(line) < 600 for line in lines), proc.stderr
    return proc.stderr if listing else lines[0]


# --- spec files: (name, how to write the file, the key named) -----------------------------------------

Writer = Callable[[Path], Path]


def text(body: str) -> Writer:
    return lambda d: write_spec(d / "spec.toml", body)


def raw(data: bytes) -> Writer:
    def write(d: Path) -> Path:
        (d / "spec.toml").write_bytes(data)
        return d / "spec.toml"

    return write


def fifo(d: Path) -> Path:
    os.mkfifo(d / "spec.toml")
    return d / "spec.toml"


def directory(d: Path) -> Path:
    (d / "spec.toml").mkdir()
    return d / "spec.toml"


def raising_trainer(d: Path) -> Path:
    (d / "exploding.py").write_text("raise RuntimeError('this module explodes on import')\n")
    return write_spec(d / "spec.toml", good('entry = "toy_trainers:fit"', 'entry = "exploding:fit"'))


def missing_tls(d: Path) -> Path:
    tls = '\ntls_ca_file = "ca.pem"\ntls_cert_file = "cert.pem"\ntls_key_file = "key.pem"'
    return write_spec(d / "spec.toml", good("n_workers = 1", "n_workers = 1" + tls))


LONG = "x" * 10_000
SPEC_CASES: list[tuple[str, Writer, str]] = [
    ("not UTF-8", raw(GOOD.replace("toy", "t\xe9").encode("latin-1")), "file"),
    ("UTF-16", raw(GOOD.encode("utf-16")), "file"),
    ("binary", raw(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4), "file"),
    ("a key twice", text(good("seed = 1", "seed = 1\nseed = 2")), "study.seed"),
    ("a table twice", text(GOOD + "\n[study]\nseed = 3\n"), "study"),
    ("a FIFO", fifo, "file"),
    ("a directory", directory, "file"),
    ("no such file", lambda d: d / "spec.toml", "file"),
    ("over the size limit", text(GOOD + ("# padding\n" * 120_000)), "file"),
    ("n_trials = 10**23", text(good("n_trials = 2", "n_trials = 100000000000000000000000")), "study.n_trials"),
    ("epochs = 10**13", text(good("epochs = 2", "epochs = 10000000000000")), "trainer.epochs"),
    ("n_workers = 100000", text(good("n_workers = 1", "n_workers = 100000")), "cluster.n_workers"),
    ("a trainer with another signature", text(good('"toy_trainers:fit"', '"os:getcwd"')), "trainer.entry"),
    ("a path as the trainer", text(good('"toy_trainers:fit"', '"../../etc/passwd:fit"')), "trainer.entry"),
    ("a trainer that raises on import", raising_trainer, "trainer.entry"),
    (
        "data_parallel beyond every worker",
        text(good("epochs = 2", "epochs = 2\ndata_parallel = 64")),
        "trainer.data_parallel",
    ),
    (
        "an unknown storage scheme",
        text(good("n_trials = 2", 'n_trials = 2\nstorage = "gopher://x/y"')),
        "study.storage",
    ),
    (
        "a relative SQLite path",
        text(good("n_trials = 2", 'n_trials = 2\nstorage = "sqlite:///rel.db"')),
        "study.storage",
    ),
    (
        "a relative journal path",
        text(good("n_trials = 2", 'n_trials = 2\nstorage = "journal:rel.log"')),
        "study.storage",
    ),
    ("an in-memory storage", text(good("n_trials = 2", 'n_trials = 2\nstorage = "sqlite://"')), "study.storage"),
    (
        "listen off loopback without TLS",
        text(good("n_workers = 1", 'n_workers = 1\nlisten = "0.0.0.0"')),
        "cluster.listen",
    ),
    ("missing TLS files", missing_tls, "cluster.tls_ca_file"),
    ("a missing warm start", text(good("n_trials = 2", 'n_trials = 2\nwarm_start = "runs/gone"')), "study.warm_start"),
    ("a 10,000-character name", text(good('name = "toy"', f'name = "{LONG}"')), "study.name"),
    ("a 10,000-character key", text(good("seed = 1", f"seed = 1\n{LONG} = 1")), "study.xxxx"),
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("command", ["check", "run"])
@pytest.mark.parametrize(("case", "write", "key"), SPEC_CASES, ids=[c[0] for c in SPEC_CASES])
def test_a_hostile_spec_is_one_line_naming_file_and_key_and_changes_nothing(
    tmp_path: Path, cli: Hypersweep, case: str, write: Writer, key: str, command: str
) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    spec = write(cwd)
    before = tree(cwd)
    args = [command, "spec.toml"] + (["--no-progress"] if command == "run" else [])
    line = the_line(cli(args, cwd, real=case in REAL))
    assert line.startswith(f"hypersweep: spec.toml: {key}"), line
    assert tree(cwd) == before, "the command changed the working directory"
    assert not (cwd / "runs").exists()
    if case == "a trainer that raises on import":
        assert "RuntimeError: this module explodes on import" in line, line
        logged = line.split("traceback in ", 1)[1].rstrip(")")
        assert "Traceback" in Path(logged).read_text() and Path(logged).parent == tmp_path / "tmp"
    if spec.name == "spec.toml" and "10,000" in case:
        assert LONG not in line and "(10" in line, line  # cut, with its length said


# --- arguments -------------------------------------------------------------------------------------------

ARG_CASES: list[tuple[str, list[str], str]] = [
    ("--workers 100000", ["run", "spec.toml", "--workers", "100000"], "--workers 100000"),
    ("--workers 0", ["run", "spec.toml", "--workers", "0"], "--workers 0"),
    ("--runs-dir is a file", ["run", "spec.toml", "--runs-dir", "afile"], "runs folder"),
    ("--tls files missing", ["run", "spec.toml", "--tls", "ca.pem", "c.pem", "k.pem"], "--tls CA"),
    ("--warm-start missing", ["run", "spec.toml", "--warm-start", "nowhere"], "--warm-start 'nowhere'"),
    ("--enqueue not UTF-8", ["run", "spec.toml", "--enqueue", "latin1.json"], "latin1.json: file"),
    ("status of nothing", ["status", "nowhere"], "nowhere holds no campaign"),
    ("check --tls files missing", ["check", "spec.toml", "--tls", "ca.pem", "c.pem", "k.pem"], "--tls CA"),
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("case", "args", "named"), ARG_CASES, ids=[c[0] for c in ARG_CASES])
def test_a_hostile_argument_is_one_line_naming_it_and_changes_nothing(
    tmp_path: Path, cli: Hypersweep, case: str, args: list[str], named: str
) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    write_spec(cwd / "spec.toml", GOOD)
    (cwd / "afile").write_text("not a folder\n")
    (cwd / "latin1.json").write_bytes('{"quality": 0.5, "x": "\xe9"}'.encode("latin-1"))
    before = tree(cwd)
    line = the_line(cli(args, cwd, real=case in REAL))
    assert named in line, line
    assert tree(cwd) == before


# --- campaign folders: read-only commands and refused resumes write nothing ---------------------------------


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished two-trial campaign (copied per test: its tests must each find it as it was)."""
    cwd = tmp_path_factory.mktemp("campaign")
    write_spec(cwd / "spec.toml", GOOD)
    proc = hypersweep(["run", "spec.toml", "--no-progress"], cwd, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return cwd / "runs" / "toy"


def _running_trials(folder: Path, n: int) -> None:
    """``n`` trials left RUNNING, as a killed controller leaves them (written through Optuna's own storage)."""
    study = optuna.load_study(
        study_name="toy", storage=JournalStorage(JournalFileBackend(str(folder / "study.journal")))
    )
    for _ in range(n):
        study.ask()


def _edit_spec(folder: Path, old: str, new: str) -> None:
    spec = folder / "spec.toml"
    spec.write_text(spec.read_text().replace(old, new, 1))


FOLDER_CASES: list[tuple[str, Callable[[Path], None], list[str], str]] = [
    ("status without a journal", lambda f: (f / "study.journal").unlink(), ["status"], "has no storage yet"),
    (
        "status of a renamed study",
        lambda f: _edit_spec(f, 'name = "toy"', 'name = "other"'),
        ["status"],
        "holds no study 'other'",
    ),
    (
        "resume under a changed spec",
        lambda f: _edit_spec(f, "epochs = 2", "epochs = 3"),
        ["resume"],
        "the spec differs",
    ),
    ("resume with --n-trials below the finished", lambda f: None, ["resume", "--n-trials", "1"], "--n-trials 1"),
    (
        "resume with --n-trials below the running",
        lambda f: _running_trials(f, 2),
        ["resume", "--n-trials", "3"],
        "left running (2)",
    ),
    (
        "resume --allow-changes to another storage",
        lambda f: _edit_spec(f, "n_trials = 2", 'n_trials = 2\nstorage = "sqlite"'),
        ["resume", "--allow-changes"],
        "study.storage",
    ),
    (
        "resume over a corrupt environment.json",
        lambda f: (f / "environment.json").write_text("{not json"),
        ["resume", "--n-trials", "3"],
        "environment.json",
    ),
    (
        "resume --spec FIFO",
        lambda f: os.mkfifo(f.parent.parent / "pipe.toml"),
        ["resume", "--spec", "../pipe.toml"],
        "pipe.toml: file",
    ),
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("case", "damage", "args", "named"), FOLDER_CASES, ids=[c[0] for c in FOLDER_CASES])
def test_a_refused_command_on_a_campaign_folder_writes_nothing(
    tmp_path: Path,
    cli: Hypersweep,
    campaign: Path,
    case: str,
    damage: Callable[[Path], None],
    args: list[str],
    named: str,
) -> None:
    folder = tmp_path / "runs" / "toy"
    shutil.copytree(campaign, folder)
    damage(folder)
    before = tree(tmp_path / "runs")
    command = [args[0], "toy", *args[1:]] + (["--no-progress"] if args[0] == "resume" else [])
    line = the_line(cli(command, folder.parent, real=case in REAL), listing=case == "resume under a changed spec")
    assert named in line, line
    assert tree(tmp_path / "runs") == before, "a refused command changed the campaign folder"


@pytest.mark.timeout(300)
def test_status_and_report_of_a_campaign_write_no_storage_and_a_closed_pipe_is_quiet(
    tmp_path: Path, cli: Hypersweep, campaign: Path
) -> None:
    folder = tmp_path / "toy"
    shutil.copytree(campaign, folder)
    before = {k: v for k, v in tree(folder).items() if not k.startswith("report")}
    status = cli(["status", "toy"], tmp_path)
    assert status.returncode == 0 and "2 of 2 trials" in status.stdout, status.stderr
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "search", "report", "toy"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # `| head -1` gone before the command prints
    _out, err = proc.communicate(timeout=180)
    assert err.decode() == "" and proc.returncode == 141, err.decode()
    after = {k: v for k, v in tree(folder).items() if not k.startswith("report")}
    assert after == before  # the storage, lock and records untouched (report/ is the report's own output)
    assert json.loads((folder / "environment.json").read_text())  # still the campaign's record
