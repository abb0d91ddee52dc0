"""The tests' throw-away TLS certificates: the benchmarks' maker (``bench.tls_certs``)."""

from __future__ import annotations

from bench.tls_certs import make_certs

__all__ = ["make_certs"]
