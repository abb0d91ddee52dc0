"""Throw-away certificates for TLS tests, made with the openssl command line."""

from __future__ import annotations

import subprocess
from pathlib import Path


def make_certs(folder: Path, hosts: tuple[str, ...] = ("127.0.0.1",)) -> tuple[str, str, str]:
    """A CA and one certificate/key it signed, valid for ``hosts``; returns (ca, cert, key) paths."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca, key, csr, cert = (folder / n for n in ("ca.key", "ca.pem", "key.pem", "req.csr", "cert.pem"))
    san = ",".join(["DNS:localhost"] + [f"IP:{h}" for h in hosts])
    ext = folder / "san.ext"
    ext.write_text(f"subjectAltName={san}\nextendedKeyUsage=serverAuth,clientAuth\n")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca),
        "-days", "2", "-subj", "/CN=hypersweep-test-ca")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", "/CN=localhost")
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
        "-out", str(cert), "-days", "2", "-extfile", str(ext))
    return str(ca), str(cert), str(key)
