"""A worker process of the embedded cluster whose worker closed in order exits without the interpreter's teardown
(:class:`cluster.plugins.ExitWhenClosed`): with torch loaded, that teardown took ~0.75 s of CPU per process, and on
a loaded machine the nanny waited its 4 s for it, then killed the process, at the end of every campaign. And a
worker process once started has imported none of the heavy modules its trials may need (torch: ~1 s of CPU, and
~1.2 s more for the ``torch._dynamo`` its first optimizer imports), nor the controller's: a campaign pays them in a
worker only when a trial there needs them (bench/NOTES.md, "A small campaign's CPU seconds"). Real worker processes
with their nannies."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from cluster.connect import open_cluster
from cluster.options import ClusterOptions


def _leave_a_probe(path: str) -> int:
    """On the worker: an object kept until the interpreter's teardown, whose finalizer then writes ``path``."""
    import builtins
    import os

    class Probe:
        def __del__(self) -> None:
            Path(path).write_text("torn down")

    builtins._hypersweep_probe = Probe()  # type: ignore[attr-defined]
    return os.getpid()


HEAVY = frozenset({"torch", "optuna", "pandas", "matplotlib", "scipy", "sqlalchemy", "search", "spaces", "trainers"})


def _heavy_modules() -> list[str]:
    """On the worker: the heavy packages (and the controller's) it has imported."""
    import sys

    return sorted(HEAVY & {name.partition(".")[0] for name in sys.modules})


@pytest.mark.slow  # an embedded cluster of one worker process
@pytest.mark.timeout(120)
def test_a_worker_process_whose_worker_closed_exits_without_the_interpreters_teardown(tmp_path: Path) -> None:
    probe = tmp_path / "probe"
    with open_cluster(ClusterOptions(n_workers=1)) as client:
        assert list(client.run(_heavy_modules).values()) == [[]], "a worker process imports at its start"
        pid = client.submit(_leave_a_probe, str(probe), pure=False).result(timeout=60)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # the cluster closed
    assert not probe.exists(), "the worker process ran the interpreter's teardown"
