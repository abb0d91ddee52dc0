"""trainers imports torch and spaces only, and ``import trainers`` does not import torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import trainers

FORBIDDEN = {"dask", "distributed", "optuna", "search", "cluster"}
PACKAGE = Path(trainers.__file__).parent


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_no_forbidden_imports() -> None:
    offenders = {p.name: _imported_roots(p) & FORBIDDEN for p in PACKAGE.glob("*.py")}
    assert {name: bad for name, bad in offenders.items() if bad} == {}


def test_import_trainers_is_cheap() -> None:
    code = "import sys, trainers; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


# --- finding a trainer: the folders it is looked in, and functions handed over in this process ---


def test_load_trainer_looks_in_the_given_folders_and_remembers_them(tmp_path: Path) -> None:
    from trainers.api import TrainerImportError, load_trainer, trainer_folders

    (tmp_path / "beside_the_spec.py").write_text("def fit(config, reporter):\n    return {'loss': 1.0}\n")
    missing = tmp_path / "nowhere"
    with pytest.raises(TrainerImportError, match=rf"cannot import module 'not_a_trainer_module' .*in {missing}"):
        load_trainer("not_a_trainer_module:fit", [missing])
    fn = load_trainer("beside_the_spec:fit", [tmp_path])
    assert fn(None, None) == {"loss": 1.0} and str(tmp_path) in sys.path
    assert trainer_folders("beside_the_spec:fit") == (str(tmp_path),)  # the folder, and where it came from (the same)
    # An installed package's own folder is not something to hand a worker.
    load_trainer("json:loads")
    assert trainer_folders("json:loads") == ()


def test_a_registered_function_is_found_by_its_entry_without_an_import() -> None:
    from trainers.api import TrainerImportError, entry_of, load_trainer, register_trainer, registered_trainer

    def make(value: float):
        def fit(config, reporter):  # noqa: ANN001, ANN202
            return {"loss": value}

        return fit

    first, second = make(1.0), make(2.0)
    entry = register_trainer(first)
    assert entry == entry_of(first) and entry.endswith(
        ":test_a_registered_function_is_found_by_its_entry_without_an_import.<locals>.make.<locals>.fit"
    )
    assert load_trainer(entry) is first and registered_trainer(entry) is first
    assert (
        register_trainer(second) == entry and load_trainer(entry) is second
    )  # the newest wins (a notebook cell re-run)
    assert register_trainer(first, "my.module:fit") == "my.module:fit" and load_trainer("my.module:fit") is first
    with pytest.raises(TrainerImportError, match="must look like 'package.module:function'"):
        register_trainer(first, "no-colon")
    with pytest.raises(TrainerImportError, match="is not callable"):
        register_trainer(42)  # type: ignore[arg-type]
