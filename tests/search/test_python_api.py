"""The Python API (``search.run`` / ``resume`` / ``load``) and finding the trainer wherever it lives.

Real campaigns: an embedded LocalCluster of worker processes (or an external scheduler and
worker), real journal storage. A trainer defined in a script without a ``__main__`` guard, in a
notebook-like session (``python -`` on stdin: a ``__main__`` with no file), or as a closure in this
module runs on workers that could never import it: it goes by value. A trainer module next to the
spec runs on a worker that was started elsewhere, which gets the spec's folder with each task.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import toy_specs

import search
from search.api import load_spec_like, to_toml
from search.spec.table import SpecError
from search.store.environment import TRAINER_PICKLE, changed_trainer_files, trainer_record
from tests.search.dask_processes import external_cluster
from trainers.api import entry_of

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def toy_spec(name: str, n_trials: int = 3, **study: Any) -> dict[str, Any]:
    return toy_specs.toy_spec(name, n_trials, seed=3, **study)


def make_fit(scale: float):
    """A trainer made here, as a closure: no worker can import it by name."""

    def fit(config, reporter):  # noqa: ANN001, ANN202 - a user's plain trainer
        metrics = {}
        for epoch in range(1, config.epochs + 1):
            metrics = {"score": scale * config.params["quality"] * epoch / config.epochs, "epoch": float(epoch)}
            reporter.report(epoch, metrics)
        return metrics

    return fit


def clean_env() -> dict[str, str]:
    """A user's shell: hypersweep installed, nothing of the tests on the path, the venv's commands first."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_CURRENT_TEST")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def python(args: list[str], cwd: Path, stdin: str | None = None, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, input=stdin, env=clean_env(), capture_output=True, text=True, timeout=timeout
    )


def hypersweep(*args: str, cwd: Path, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "hypersweep"), *args], cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout
    )


# --- in this process --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_run_load_and_reproduce_with_a_closure_trainer(tmp_path: Path) -> None:
    fit = make_fit(2.0)
    result = search.run(toy_spec("closure"), trainer=fit, runs_dir=tmp_path / "runs", progress=False)
    frame = result.trials
    assert list(frame["state"]) == ["COMPLETE"] * 3
    assert frame["score"].tolist() == pytest.approx((2.0 * frame["params.quality"]).tolist())
    assert result.best_value == pytest.approx(frame["score"].max())
    assert result.best_params == {"quality": pytest.approx(frame["params.quality"][frame["score"].idxmax()])}
    assert result.folder == (tmp_path / "runs" / "closure").resolve()
    assert "Best trials of study 'closure'" in str(result) and "3 COMPLETE" in repr(result)
    # The frozen spec names the function it ran; the campaign kept it, as its workers got it.
    entry = "test_python_api:make_fit.<locals>.fit"
    assert f'entry = "{entry}"' in (result.folder / "spec.toml").read_text()
    env = json.loads((result.folder / "environment.json").read_text())["trainer"]
    assert env["entry"] == entry and env["shipped"] == "by value" and env["pickle"] == TRAINER_PICKLE
    assert env["files"]["test_python_api.py"] == env["source_sha256"]  # and the modules loaded beside it
    assert (result.folder / TRAINER_PICKLE).is_file()

    again = search.load(result.folder)
    assert again.trials.equals(frame) and again.spec.sha256 == result.spec.sha256
    check = again.reproduce(1)
    assert check.matched and check.entry == entry


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_resume_with_a_new_trainer_keeps_it_for_the_campaign(tmp_path: Path) -> None:
    first = search.run(toy_spec("resumed", n_trials=2), trainer=make_fit(1.0), runs_dir=tmp_path, progress=False)
    # After a restart, the notebook's `fit` is a new function: it runs under the frozen spec's entry from now on.
    result = search.resume(first.folder, trainer=make_fit(10.0), progress=False)
    assert result.trials.equals(first.trials)  # the budget was spent: nothing ran again
    env = json.loads((first.folder / "environment.json").read_text())
    assert [r["trainer"]["entry"] for r in (env, *env["resumes"])] == ["test_python_api:make_fit.<locals>.fit"] * 2
    from search.store.environment import stored_trainer
    from trainers.api import RecordingReporter, TrialConfig

    kept = stored_trainer(first.folder)
    config = TrialConfig(study="resumed", number=0, params={"quality": 0.5}, seed=0, epochs=1)
    assert kept is not None and kept(config, RecordingReporter())["score"] == pytest.approx(5.0)


def test_the_spec_may_be_a_path_a_toml_string_or_a_dict(tmp_path: Path) -> None:
    data = toy_spec("forms")
    text = to_toml(data)
    path = tmp_path / "forms.toml"
    path.write_text("# my comment\n" + text)
    by_path = load_spec_like(str(path))
    assert by_path.text.startswith("# my comment") and by_path.source == str(path)  # read as the CLI reads it
    assert load_spec_like(text).study == by_path.study == load_spec_like(data).study
    fit = make_fit(1.0)
    overridden = load_spec_like(path, trainer=fit)
    assert overridden.trainer.entry == entry_of(fit) and overridden.source == str(path)
    assert overridden.text.startswith(f"# written by search.run from {path}; trainer {entry_of(fit)}")
    assert overridden.study == by_path.study and overridden.space.names == by_path.space.names
    with pytest.raises(SpecError, match=r"<dict spec>: study.n_trial: unknown key"):
        load_spec_like({**data, "study": {**data["study"], "n_trial": 3}})
    with pytest.raises(SpecError, match="<TOML string>: toml: not valid TOML"):
        load_spec_like("[study\nname = 1")
    with pytest.raises(TypeError, match=r"'study.seed' is None \(TOML has no null"):
        to_toml({"study": {"seed": None}})


@pytest.mark.slow
def test_import_search_stays_light_and_exports_the_api() -> None:
    code = (
        "import sys, search\nheavy = [m for m in ('optuna', 'distributed', 'torch', 'pandas') if m in sys.modules]\n"
        "print(heavy, callable(search.run), callable(search.resume), callable(search.load), search.Result.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["[]", "True", "True", "True", "Result"], out.stderr


@pytest.mark.slow
def test_a_shipment_loads_in_a_process_that_never_saw_the_trainer(tmp_path: Path) -> None:
    """What a worker gets: a by-name trainer with the folders to find it in, or a closure by value."""
    from cluster.executor import ship_trainer
    from trainers.api import load_trainer

    (tmp_path / "shipped_by_name.py").write_text("def fit(config, reporter):\n    return {'score': 7.0}\n")
    load_trainer("shipped_by_name:fit", [tmp_path])  # as the spec check does on the controller
    by_name, by_value = ship_trainer("shipped_by_name:fit"), ship_trainer(make_fit(3.0))
    assert by_name.pickled is None and by_name.folders == (str(tmp_path),)
    assert by_value.pickled and by_value.entry == "test_python_api:make_fit.<locals>.fit"
    code = textwrap.dedent("""
        import pickle, sys
        from trainers.api import RecordingReporter, TrialConfig
        config = TrialConfig(study="s", number=0, params={"quality": 0.5}, seed=0, epochs=1)
        for shipment in pickle.load(sys.stdin.buffer):
            print(shipment.load()(config, RecordingReporter())["score"])
    """)
    import pickle

    out = subprocess.run(
        [sys.executable, "-c", code],
        input=pickle.dumps([by_name, by_value]),
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        timeout=60,
    )
    assert out.stdout.decode().split() == ["7.0", "1.5"], out.stderr.decode()[-2000:]


# --- a script, a notebook ----------------------------------------------------------------------

TRAINER_CODE = """
import os
import search

OFFSET = 0.5   # a global of the script: the trainer must see it on the workers

def bump(value):
    return value + OFFSET

def fit(config, reporter):
    metrics = {}
    for epoch in range(1, config.epochs + 1):
        metrics = {"score": bump(config.params["quality"]) * epoch, "epoch": float(epoch)}
        reporter.report(epoch, metrics)
    return metrics

SPEC = '''
[study]
name = "NAME"
direction = "maximize"
metric = "score"
sampler = "tpe"
sampling = "process"   # the sampler's child process must start too (an error, not a thread, if it cannot)
seed = 1
n_trials = 4

[trainer]
epochs = 2

[space]
quality = { type = "float", low = 0.0, high = 1.0 }

[cluster]
n_workers = 2
'''
"""

NO_GUARD = (
    TRAINER_CODE
    + """
with open("body-ran.txt", "a") as out:   # every process that runs this script's body says so
    out.write(f"{os.getpid()}\\n")
result = search.run(SPEC.replace("NAME", "script"), trainer=fit, progress=False)
print("RESULT", result.trials[["state", "score", "params.quality"]].to_json(orient="records"))
"""
)


def _rows(stdout: str) -> list[dict[str, Any]]:
    line = next(line for line in stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


@pytest.fixture(scope="module")
def script_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    """``python train_script.py``: a script with no ``__main__`` guard that runs a campaign of its own trainer."""
    tmp = tmp_path_factory.mktemp("script")
    (tmp / "train_script.py").write_text(NO_GUARD)
    return tmp, python(["train_script.py"], cwd=tmp)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_script_without_a_main_guard_runs_its_own_trainer_once(script_run) -> None:  # noqa: ANN001
    tmp, proc = script_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len((tmp / "body-ran.txt").read_text().split()) == 1  # no worker or sampler process re-ran it
    rows = _rows(proc.stdout)
    assert [r["state"] for r in rows] == ["COMPLETE"] * 4
    assert [r["score"] for r in rows] == pytest.approx([(r["params.quality"] + 0.5) * 2 for r in rows])
    env = json.loads((tmp / "runs" / "script" / "environment.json").read_text())["trainer"]
    assert (env["entry"], env["shipped"], env["source"]) == ("__main__:fit", "by value", str(tmp / "train_script.py"))
    assert "Traceback" not in proc.stderr and "Port 8787" not in proc.stderr and "INFO" not in proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_status_reproduce_and_resume_need_neither_the_script_nor_its_folder(script_run) -> None:  # noqa: ANN001
    tmp, proc = script_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = tmp / "runs" / "script"
    (tmp / "train_script.py").rename(tmp / "moved.py.txt")
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    assert hypersweep("status", str(folder), cwd=elsewhere).returncode == 0
    repro = hypersweep("reproduce", str(folder), "2", cwd=elsewhere)
    assert repro.returncode == 0, repro.stdout + repro.stderr
    assert "MATCH: trial 2" in repro.stdout and "runs from the copy the campaign kept" in repro.stdout
    assert (
        "1 of the trainer's 1 recorded file(s) changed since the campaign ran: train_script.py (gone)" in repro.stdout
    )
    resumed = hypersweep("resume", str(folder), "--no-progress", cwd=elsewhere)  # the kept copy is the trainer
    assert resumed.returncode == 0 and "trials: 4 COMPLETE" in resumed.stdout, resumed.stdout + resumed.stderr


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_notebook_style_session_ships_its_trainer_by_value(tmp_path: Path) -> None:
    # `python -` reads the code from stdin: __main__ has no file, as in a notebook; its functions come from <stdin>.
    code = TRAINER_CODE + textwrap.dedent("""
        result = search.run(SPEC.replace("NAME", "notebook"), trainer=fit, progress=False)
        print("RESULT", result.trials[["state", "score", "params.quality"]].to_json(orient="records"))
        again = search.load(result.folder)
        print("LOADED", len(again.trials), again.best_value == result.best_value)
    """)
    proc = python(["-"], cwd=tmp_path, stdin=code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _rows(proc.stdout)
    assert [r["state"] for r in rows] == ["COMPLETE"] * 4
    assert [r["score"] for r in rows] == pytest.approx([(r["params.quality"] + 0.5) * 2 for r in rows])
    assert "LOADED 4 True" in proc.stdout
    env = json.loads((tmp_path / "runs" / "notebook" / "environment.json").read_text())["trainer"]
    assert env["source"] is None and "<stdin>" in env["note"] and env["source_sha256"]


# --- a trainer next to the spec, on a worker started elsewhere --------------------------------

PACKAGE_SPEC = """
[study]
name = "beside"
direction = "maximize"
metric = "score"
sampler = "random"
seed = 2
n_trials = 3

[trainer]
entry = "mytrain.fit:fit"
epochs = 2

[space]
quality = { type = "float", low = 0.0, high = 1.0 }
"""


def write_trainer_package(folder: Path) -> None:
    """``folder/mytrain``: a package whose ``fit`` imports a sibling module; ``unused.py`` is never imported."""
    package = folder / "mytrain"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "scale.py").write_text("FACTOR = 3.0\n")
    (package / "unused.py").write_text("# part of the package, never imported\n")
    (package / "fit.py").write_text(
        textwrap.dedent("""
        from mytrain.scale import FACTOR

        def fit(config, reporter):
            metrics = {}
            for epoch in range(1, config.epochs + 1):
                metrics = {"score": FACTOR * config.params["quality"] * epoch, "epoch": float(epoch)}
                reporter.report(epoch, metrics)
            return metrics
    """)
    )
    (folder / "spec.toml").write_text(PACKAGE_SPEC)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_workers_started_elsewhere_find_the_trainer_beside_the_spec(tmp_path: Path) -> None:
    project = tmp_path / "project"
    write_trainer_package(project / "exp")
    # The workers start in another folder with nothing of the project on their path.
    with external_cluster(tmp_path / "cluster", n_workers=1) as cluster:
        proc = hypersweep(
            "run", "exp/spec.toml", "--scheduler", cluster.address, "--runs-dir", "runs", "--no-progress", cwd=project
        )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder = project / "runs" / "beside"
    rows = list(csv.DictReader((folder / "summary.csv").read_text().splitlines()))  # columns by name
    assert [r["state"] for r in rows] == ["COMPLETE"] * 3
    assert [float(r["score"]) for r in rows] == pytest.approx([6.0 * float(r["params.quality"]) for r in rows])
    env = json.loads((folder / "environment.json").read_text())["trainer"]
    assert env["shipped"] == "by name" and env["root"] == str(project / "exp")
    assert sorted(env["files"]) == ["mytrain/__init__.py", "mytrain/fit.py", "mytrain/scale.py", "mytrain/unused.py"]
    assert env["paths"][:2] == [str(project / "exp"), str(project)]


@pytest.mark.slow
def test_the_environment_hashes_the_whole_package_or_the_modules_a_script_imported(tmp_path: Path) -> None:
    write_trainer_package(tmp_path / "pkgcase")
    spec = load_spec_like(tmp_path / "pkgcase" / "spec.toml")  # imports mytrain from the spec's folder
    record = trainer_record(spec.trainer.entry, spec.source)
    assert sorted(record["files"]) == ["mytrain/__init__.py", "mytrain/fit.py", "mytrain/scale.py", "mytrain/unused.py"]
    assert record["source"] == str(tmp_path / "pkgcase" / "mytrain" / "fit.py")
    assert changed_trainer_files(record) == []
    (tmp_path / "pkgcase" / "mytrain" / "unused.py").write_text("# edited\n")
    assert changed_trainer_files(record) == ["mytrain/unused.py"]

    single = tmp_path / "single"
    single.mkdir()
    (single / "solo_helper.py").write_text("K = 1\n")
    (single / "solo_notes.py").write_text("# in the folder, never imported\n")
    (single / "solo_train.py").write_text(
        "import solo_helper\n\ndef fit(config, reporter):\n    return {'score': 1.0}\n"
    )
    (single / "spec.toml").write_text(PACKAGE_SPEC.replace("mytrain.fit:fit", "solo_train:fit"))
    single_spec = load_spec_like(single / "spec.toml")
    record = trainer_record(single_spec.trainer.entry, single_spec.source)
    assert sorted(record["files"]) == ["solo_helper.py", "solo_train.py"]
    assert record["files_sha256"] and record["paths"][0] == str(single)
