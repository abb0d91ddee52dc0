"""The spec's ``[cluster]`` section: where trials run and how the cluster is secured."""

from __future__ import annotations

import dataclasses

from .spec_table import SpecTable

__all__ = ["ClusterSpec", "CLUSTER_KEYS", "parse_cluster"]

CLUSTER_KEYS = (
    "scheduler", "n_workers", "slots_per_worker", "connect_timeout", "dashboard",
    "listen", "tls_ca_file", "tls_cert_file", "tls_key_file",
)  # fmt: skip
_TLS_KEYS = ("tls_ca_file", "tls_cert_file", "tls_key_file")


@dataclasses.dataclass(frozen=True)
class ClusterSpec:
    scheduler: str = ""
    n_workers: int = 0
    slots_per_worker: int = 1
    connect_timeout: float = 10.0
    dashboard: bool = False
    listen: str = "127.0.0.1"
    tls_ca_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""

    @property
    def tls(self) -> bool:
        return bool(self.tls_ca_file)


def parse_cluster(t: SpecTable) -> ClusterSpec:
    spec = ClusterSpec(
        scheduler=t.str("scheduler", ""),
        n_workers=t.int("n_workers", 0, minimum=0),
        slots_per_worker=t.int("slots_per_worker", 1, minimum=1),
        connect_timeout=t.float("connect_timeout", 10.0, minimum=0.1),
        dashboard=t.bool("dashboard", False),
        listen=t.str("listen", "127.0.0.1"),
        tls_ca_file=t.str("tls_ca_file", ""),
        tls_cert_file=t.str("tls_cert_file", ""),
        tls_key_file=t.str("tls_key_file", ""),
    )
    given = [k for k in _TLS_KEYS if getattr(spec, k)]
    if given and len(given) != len(_TLS_KEYS):
        missing = sorted(set(_TLS_KEYS) - set(given))
        raise t.error(missing[0], f"TLS needs all of {', '.join(_TLS_KEYS)}; {missing[0]} is missing")
    return spec
