"""Run as the ``hypersweep`` command, the processes the controller spawns (the embedded cluster's workers, the
sampler's child) do not run the command's script again: they are told to skip its ``__main__``, as for
``python -m search`` (each imported ``search.cli`` and what it imports for nothing, ~0.07 s of CPU per process)."""

from __future__ import annotations

import multiprocessing.spawn
import sys
import types
from pathlib import Path

import pytest

from search import cli


def _script(tmp_path: Path, *, ours: bool) -> types.ModuleType:
    """A ``__main__`` as pip's ``hypersweep`` script is (``from search.cli import main``), or a user's own script."""
    script = types.ModuleType("__main__")
    script.__file__ = str(tmp_path / ("hypersweep" if ours else "train.py"))
    script.__spec__ = None
    script.main = cli.main if ours else (lambda: 0)  # type: ignore[attr-defined]
    return script


def test_the_hypersweep_commands_spawned_processes_skip_its_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "__main__", _script(tmp_path, ours=True))
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    data = multiprocessing.spawn.get_preparation_data("probe")  # what a spawned child is told to do with __main__
    assert "init_main_from_path" not in data, "a spawned process would run the hypersweep script again"
    assert data["init_main_from_name"] == "search.__main__"  # multiprocessing skips a name ending in .__main__


def test_a_users_script_is_run_again_in_spawned_processes_as_python_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _script(tmp_path, ours=False)
    monkeypatch.setitem(sys.modules, "__main__", script)
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert script.__spec__ is None
    assert multiprocessing.spawn.get_preparation_data("probe")["init_main_from_path"] == script.__file__
