"""Light commands load neither torch nor distributed: ``check`` of a spec, ``status`` and ``resume`` of a finished
campaign (which starts no cluster and imports no trainer). Each runs in a fresh interpreter, which then lists
what it imported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.light import finished_campaign

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "distributed")
RUN_CLI = (
    "import sys\n"
    "from search.cli import main\n"
    "code = main(sys.argv[1:])\n"
    f"print('IMPORTED', sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    "sys.exit(code)\n"
)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", RUN_CLI, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 finished trials of a trainer that does not exist: nothing may import it."""
    return finished_campaign(tmp_path_factory.mktemp("light"), 12, workers=4, trainer="no_such_module:fit")


def test_check_of_the_example_imports_neither_torch_nor_distributed() -> None:
    out = _cli("check", "examples/digits.toml")
    assert out.returncode == 0, out.stderr
    assert "examples/digits.toml: ok" in out.stdout
    assert "IMPORTED []" in out.stdout


def test_check_still_refuses_a_param_the_trainer_does_not_accept(tmp_path: Path) -> None:
    text = (ROOT / "examples" / "digits.toml").read_text()
    spec = tmp_path / "bad.toml"
    spec.write_text(text + '\n[space.no_such_param]\ntype = "float"\nlow = 0.0\nhigh = 1.0\n')
    out = _cli("check", str(spec))
    assert out.returncode == 2
    assert "space.no_such_param" in out.stderr and "does not accept" in out.stderr


def test_status_of_a_finished_campaign_imports_neither(finished: Path) -> None:
    out = _cli("status", str(finished))
    assert out.returncode == 0, out.stderr
    assert "12 of 12 trials" in out.stdout
    assert "IMPORTED []" in out.stdout


@pytest.mark.slow
def test_resume_of_a_finished_campaign_starts_nothing_and_changes_nothing(finished: Path) -> None:
    journal = finished / "study.journal"
    before = journal.read_bytes()
    out = _cli("resume", str(finished), "--no-progress")
    assert out.returncode == 0, out.stderr
    assert "trials: 12 COMPLETE" in out.stdout
    assert "IMPORTED []" in out.stdout  # no trainer (it does not exist), no cluster
    assert journal.read_bytes() == before
    assert "controller not running" in _cli("status", str(finished)).stdout


def test_resume_with_a_larger_budget_checks_the_trainer_first(finished: Path) -> None:
    out = _cli("resume", str(finished), "--no-progress", "--n-trials", "13")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "trainer.entry" in out.stderr and "no_such_module" in out.stderr
