"""The environment record describes an unloaded CPU-only torch without importing it (a controller starts faster),
and gives the same fields a loaded torch gives."""

from __future__ import annotations

import importlib.machinery
import json
import subprocess
import sys
from pathlib import Path

import pytest

from search.store.environment import _unloaded_build, torch_info

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import json, sys
from search.store.environment import torch_info
unloaded = torch_info()
loaded_after = "torch" in sys.modules
import torch
print(json.dumps({"unloaded": unloaded, "loaded_after": loaded_after, "loaded": torch_info(),
                  "cuda_build": bool(torch.version.cuda or torch.version.hip)}))
"""


@pytest.mark.slow  # a fresh interpreter that imports torch
def test_a_cpu_build_is_described_without_importing_torch_and_as_the_loaded_torch_describes_it() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    if out["cuda_build"]:  # a CUDA build is still asked (cuda_available, cuDNN, NCCL, the GPUs)
        assert out["loaded_after"] and out["unloaded"] == out["loaded"]
        return
    assert not out["loaded_after"]
    assert out["unloaded"]["threads"] is None and isinstance(out["loaded"]["threads"], int)
    assert {**out["loaded"], "threads": None} == out["unloaded"]


def _spec(folder: Path) -> importlib.machinery.ModuleSpec:
    spec = importlib.machinery.ModuleSpec("torch", None, is_package=True)
    spec.submodule_search_locations = [str(folder)]
    return spec


def test_the_build_is_read_from_version_py_and_a_file_not_as_expected_gives_none(tmp_path: Path) -> None:
    (tmp_path / "version.py").write_text(
        "from typing import Optional\n__version__ = '9.1.0+cu124'\ndebug = False\ncuda: Optional[str] = '12.4'\n"
        "git_version = 'abc'\nhip: Optional[str] = None\n"
    )
    build = _unloaded_build(_spec(tmp_path))
    assert build is not None
    assert (build["__version__"], build["cuda"], build["hip"]) == ("9.1.0+cu124", "12.4", None)
    (tmp_path / "version.py").write_text("__version__ = '9.1.0'\n")  # no cuda/hip: not trusted
    assert _unloaded_build(_spec(tmp_path)) is None
    (tmp_path / "version.py").write_text("__version__ = (\n")
    assert _unloaded_build(_spec(tmp_path)) is None
    assert _unloaded_build(_spec(tmp_path / "absent")) is None


@pytest.mark.slow  # imports torch here, when no test before it did
def test_in_a_process_that_has_torch_loaded_torch_itself_is_asked() -> None:
    import torch

    info = torch_info()
    assert info["version"] == torch.__version__ and info["threads"] == torch.get_num_threads()
