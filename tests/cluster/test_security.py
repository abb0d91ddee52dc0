"""Safe defaults: loopback unless told otherwise, and then TLS (or an explicit --insecure)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
import pytest

from cluster import ClusterOptions, TLSFiles, open_cluster
from tls_certs import make_certs
from tests.campaign_storage import load

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "tests" / "search"

SPEC = """
[study]
name = "tls"
direction = "maximize"
metric = "score"
sampler = "random"
n_trials = 3

[trainer]
entry = "toy_trainers:fit"
epochs = 2

[space]
quality = {{ type = "float", low = 0.0, high = 1.0 }}

[cluster]
n_workers = 2
listen = "{listen}"
{tls}
"""


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(TOY), str(ROOT)])}


def hypersweep(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "search", *args], capture_output=True, text=True, env=env(), timeout=timeout
    )


needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="the openssl command is not installed")


def test_plain_tcp_on_a_non_loopback_address_is_refused(tmp_path: Path) -> None:
    spec = tmp_path / "open.toml"
    spec.write_text(textwrap.dedent(SPEC.format(listen="0.0.0.0", tls="")))
    runs = tmp_path / "runs"
    proc = hypersweep("run", str(spec), "--runs-dir", str(runs))
    assert proc.returncode == 2, proc.stderr
    assert "without TLS is refused" in proc.stderr and "--insecure" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (runs / "tls").exists()


def test_options_refuse_half_configured_tls(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must be an existing PEM file"):
        TLSFiles(str(tmp_path / "ca.pem"), str(tmp_path / "c.pem"), str(tmp_path / "k.pem"))
    with pytest.raises(ValueError, match="uses TLS"):
        ClusterOptions(address="tls://10.0.0.1:8786")


@needs_openssl
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_campaign_runs_over_tls_on_a_non_loopback_listen_address(tmp_path: Path) -> None:
    ca, cert, key = make_certs(tmp_path / "certs")
    tls = f'tls_ca_file = "{ca}"\ntls_cert_file = "{cert}"\ntls_key_file = "{key}"'
    spec = tmp_path / "tls.toml"
    spec.write_text(textwrap.dedent(SPEC.format(listen="0.0.0.0", tls=tls)))
    runs = tmp_path / "runs"
    proc = hypersweep("run", str(spec), "--runs-dir", str(runs), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    study = load(runs / "tls", "tls")
    trials = study.get_trials()
    assert len(trials) == 3 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert all(t.user_attrs["worker"].startswith("tls://") for t in trials)


@needs_openssl
@pytest.mark.timeout(120)
def test_a_client_without_certificates_cannot_join_a_tls_cluster(tmp_path: Path) -> None:
    from distributed import Client

    ca, cert, key = make_certs(tmp_path / "certs")
    with open_cluster(ClusterOptions(n_workers=1, tls=TLSFiles(ca, cert, key))) as client:
        address = client.scheduler.address
        assert address.startswith("tls://127.0.0.1:")
        with pytest.raises((OSError, TimeoutError, TypeError, ValueError)):
            Client(address.replace("tls://", "tcp://"), timeout=3)
