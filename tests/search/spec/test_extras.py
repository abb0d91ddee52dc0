"""A missing optional extra that a spec needs is named with its install command at ``check`` and at ``run`` before
any trial. The extras are installed in the test venv, so each is made unimportable in a subprocess (a meta-path
blocker in ``sitecustomize``), as it is where it was never installed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from search.compat.versions import EXTRAS, install_command
from search.spec.campaign_spec import parse_spec
from search.spec.extras import needed_extras
from tests.search.toy_specs import toy_spec

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent

BLOCKER = """
import os, sys
_blocked = {m for m in os.environ.get("BLOCK_MODULES", "").split(",") if m}
class _Hide:  # each finder, blind to the blocked packages: found nowhere, as where they were never installed
    def __init__(self, inner):
        self.inner = inner
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _blocked:
            return None
        return self.inner.find_spec(name, path, target)
    def __getattr__(self, attr):
        return getattr(self.inner, attr)
sys.meta_path[:] = [_Hide(f) for f in sys.meta_path]
"""

HEAD = '[study]\nname = "x"\ndirection = "maximize"\nmetric = "score"\nn_trials = 2\n'
SPACE = '[space]\nquality = { type = "float", low = 0, high = 1 }\n'
LR = '[space]\nlr = { type = "float", low = 0.001, high = 0.1, log = true }\n'
TRAINER = '[trainer]\nentry = "toy_trainers:fit"\nepochs = 1\n'
LIGHTNING_TRAINER = (
    "from trainers.integrations.lightning import HypersweepCallback\n\ndef fit(config, reporter):\n    return {}\n"
)
JOB = 'walltime = "00:10:00"\ncores = 1\nmemory = "1GB"\n'
HF_TRAINER = (
    "from trainers.integrations.huggingface import last_checkpoint\n\ndef fit(config, reporter):\n    return {}\n"
)

# extra -> (spec text, a trainer module to write beside it: file name, text)
CASES = {
    "slurm": (
        HEAD
        + TRAINER
        + SPACE
        + '[cluster]\nbackend = "slurm"\nlisten = "0.0.0.0"\n[cluster.slurm]\npartition = "p"\n'
        + JOB,
        "",
        "",
    ),
    "pbs": (
        HEAD + TRAINER + SPACE + '[cluster]\nbackend = "pbs"\nlisten = "0.0.0.0"\n[cluster.pbs]\nqueue = "q"\n' + JOB,
        "",
        "",
    ),
    "kubernetes": (
        HEAD + TRAINER + SPACE + '[cluster]\nbackend = "kubernetes"\n[cluster.kubernetes]\nimage = "i"\n',
        "",
        "",
    ),
    "mlflow": (HEAD + TRAINER + SPACE + "[logging]\nmlflow = true\n", "", ""),
    "wandb": (HEAD + TRAINER + SPACE + "[logging]\nwandb = true\n", "", ""),
    "lightning": (HEAD + '[trainer]\nentry = "ltrain:fit"\n' + SPACE, "ltrain.py", LIGHTNING_TRAINER),
    "huggingface": (HEAD + '[trainer]\nentry = "hftrain:fit"\n' + SPACE, "hftrain.py", HF_TRAINER),
    "mnist1d": (
        HEAD.replace('"score"', '"val_accuracy"')
        + '[trainer]\nentry = "trainers.classifier:fit"\ndataset = "mnist1d"\nepochs = 1\n'
        + LR,
        "",
        "",
    ),
}


def _env(tmp_path: Path, blocked: str) -> dict[str, str]:
    (tmp_path / "blocker").mkdir(exist_ok=True)
    (tmp_path / "blocker" / "sitecustomize.py").write_text(BLOCKER)
    path = os.pathsep.join([str(tmp_path / "blocker"), str(ROOT), str(ROOT / "tests" / "search")])
    return {
        **os.environ,
        "PYTHONPATH": path,
        "BLOCK_MODULES": blocked,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
    }


def _hypersweep(tmp_path: Path, blocked: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "hypersweep"), *args],
        cwd=tmp_path,
        env=_env(tmp_path, blocked),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_extra_has_a_case_and_an_install_command() -> None:
    assert set(CASES) == set(EXTRAS)
    assert install_command("huggingface") == (
        "pip install -e '.[huggingface]' in the hypersweep checkout, or pip install transformers accelerate"
    )


def test_a_spec_without_optional_parts_needs_no_extra() -> None:
    assert needed_extras(parse_spec(toy_spec("plain"), "s.toml")) == []


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_check_names_each_missing_extra_with_its_install_command(tmp_path: Path) -> None:
    """One subprocess checks every case (each spec loaded and checked as ``check`` does), every extra blocked."""
    for extra, (text, trainer_file, trainer) in CASES.items():
        (tmp_path / f"{extra}.toml").write_text(text)
        if trainer_file:
            (tmp_path / trainer_file).write_text(trainer)
    script = textwrap.dedent(
        """
        import os, sys
        sys.path.insert(0, os.getcwd())
        from search.spec.campaign_spec import load_spec
        from search.session.preflight import cluster_for
        from search.session.runner import RunOptions
        from spaces.errors import InputError
        for extra in sys.argv[1:]:
            try:
                cluster_for(load_spec(f"{extra}.toml"), RunOptions(insecure=True))
                print(extra, "ok")
            except InputError as exc:
                print(extra, "error", exc)
        """
    )
    blocked = ",".join(
        ["pytorch_lightning", *dict.fromkeys(module for pairs in EXTRAS.values() for module, _ in pairs)]
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *CASES],
        cwd=tmp_path,
        env=_env(tmp_path, blocked),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == len(CASES)
    for extra, line in zip(CASES, lines):
        assert line.startswith(f"{extra} error {extra}.toml: "), line
        assert f"[{extra}] extra" in line and install_command(extra) in line, line


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_run_refuses_before_any_trial_and_check_versions_says_not_installed(tmp_path: Path) -> None:
    (tmp_path / "m.toml").write_text(CASES["mnist1d"][0])
    run = _hypersweep(tmp_path, "mnist1d", "run", "m.toml", "--no-progress")
    assert run.returncode == 2
    assert run.stderr.strip() == (
        "hypersweep: m.toml: trainer.dataset: needs the [mnist1d] extra (mnist1d not installed): "
        + install_command("mnist1d")
    )
    assert not (tmp_path / "runs").exists()  # no campaign folder, no trial
    check = _hypersweep(tmp_path, "mnist1d", "check", "m.toml")
    assert (check.returncode, check.stderr) == (run.returncode, run.stderr)
    versions = _hypersweep(tmp_path, "mnist1d", "check", "--versions")
    assert versions.returncode == 0
    assert (
        f"  mnist1d:     mnist1d          not installed: {install_command('mnist1d')}" in versions.stdout.splitlines()
    )
