"""A module another thread is still importing is not there yet: the CI failure "partially initialized module
'torch' has no attribute 'cuda'" came from the memory monitor reading ``sys.modules`` while a trial imported torch."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SLOW_IMPORT = """
import sys
import threading
sys.path.insert(0, {folder!r})
{check}
threading.Thread(target=lambda: __import__({name!r}), daemon=True).start()
import {name}_started  # noqa: the module's body has begun (it imports this first)
{name}_started.begun.wait(30)
during = probe()
{name}_started.go.set()
import {name}
after = probe()
print(during is None, after is not None)
"""

STARTED = """
import threading
begun, go = threading.Event(), threading.Event()
"""

BODY = """
import {name}_started
{name}_started.begun.set()
{name}_started.go.wait(30)  # its import goes on only when the test says so
{attrs}
"""


def run_slow_import(tmp_path: Path, name: str, attrs: str, check: str) -> list[str]:
    """Import ``name`` in a thread, held half way; what ``probe()`` gives during the import and after it."""
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text(BODY.format(name=name, attrs=textwrap.dedent(attrs)))
    (tmp_path / f"{name}_started.py").write_text(STARTED)
    code = SLOW_IMPORT.format(folder=str(tmp_path), name=name, check=textwrap.dedent(check))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.split()


def test_loaded_is_none_while_another_thread_still_imports_the_module(tmp_path: Path) -> None:
    check = """
        from trainers.loaded import loaded
        probe = lambda: loaded("slowmod")
    """
    assert run_slow_import(tmp_path, "slowmod", "VALUE = 1", check) == ["True", "True"]


def test_the_memory_monitor_takes_a_torch_still_importing_for_no_cuda_mock_torch(tmp_path: Path) -> None:
    """A stand-in ``torch`` package (the import machinery is what is tested, not torch) held half way through its
    import: ``cuda_peak`` says no CUDA rather than failing on the partial module."""
    attrs = """
        class cuda:
            is_available = is_initialized = staticmethod(lambda: True)
            max_memory_allocated = staticmethod(lambda device: 7)
    """
    check = f"""
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from cluster.device_figures import cuda_peak
        probe = lambda: cuda_peak([0])
    """
    assert run_slow_import(tmp_path, "torch", attrs, check) == ["True", "True"]
