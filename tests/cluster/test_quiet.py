"""Quiet by default: the embedded cluster prints no dashboard port clash and no Dask INFO logs on the terminal.

Dask logs INFO to stderr through its own handler (not the root logger's, so not into caplog): what reaches
the terminal is checked on real processes' stderr, with Dask's default logging and port 8787 held by someone else.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.search.toy_specs import toy_toml

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "tests" / "search"

OPEN = """
from cluster import ClusterOptions, open_cluster
with open_cluster(ClusterOptions(n_workers=1, verbose={verbose})) as client:
    assert client.submit(sum, [1, 2]).result(timeout=60) == 3
print("ok")
"""

SPEC = toy_toml(name="quiet")  # 2 toy trials of 2 epochs on 1 worker


@pytest.fixture
def port_8787_taken() -> Iterator[None]:
    """Dask's default dashboard port is in use, as when another cluster runs on this machine."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", 8787))
        sock.listen()
    except OSError:
        pass  # someone else holds it already: just as good
    try:
        yield
    finally:
        sock.close()


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}  # Dask's own defaults (INFO)
    env["PYTHONPATH"] = os.pathsep.join([str(TOY), str(ROOT)])
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, cwd=ROOT, timeout=180)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_embedded_cluster_is_quiet_unless_verbose(port_8787_taken: None) -> None:
    quiet = run("-c", OPEN.format(verbose=False))
    assert quiet.returncode == 0 and quiet.stdout.strip() == "ok", quiet.stderr
    assert "already in use" not in quiet.stderr and "8787" not in quiet.stderr, quiet.stderr
    assert "INFO" not in quiet.stderr, quiet.stderr
    # The control: the same run with verbose=True shows Dask's INFO logs, so the check above can fail.
    verbose = run("-c", OPEN.format(verbose=True))
    assert verbose.returncode == 0, verbose.stderr
    assert "distributed.scheduler - INFO" in verbose.stderr
    assert "already in use" not in verbose.stderr  # no dashboard was asked for


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_campaign_on_the_embedded_cluster_prints_no_port_clash_or_info(tmp_path: Path, port_8787_taken: None) -> None:
    spec = tmp_path / "quiet.toml"
    spec.write_text(SPEC)
    proc = run("-m", "search", "run", str(spec), "--runs-dir", str(tmp_path / "runs"), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "already in use" not in proc.stderr and "8787" not in proc.stderr, proc.stderr
    assert "INFO" not in proc.stderr, proc.stderr
