"""What a process listens on, and whether a port speaks plain HTTP (the no-HTTP tests of the worker, the
scheduler and the SLURM jobs' workers)."""

from __future__ import annotations

import contextlib
import socket

import psutil


def listening(pid: int) -> list[tuple[str, int]]:
    """(ip, port) of every listening TCP socket of ``pid`` and its descendants."""
    root = psutil.Process(pid)
    found = []
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            found += [(c.laddr.ip, c.laddr.port) for c in proc.net_connections("tcp") if c.status == psutil.CONN_LISTEN]
    return found


def speaks_http(ip: str, port: int) -> bool:
    """Whether what listens at ``ip:port`` answers a plain HTTP request (a 404 too)."""
    try:
        with socket.create_connection(("127.0.0.1" if ip in ("0.0.0.0", "::") else ip, port), timeout=2) as sock:
            sock.sendall(b"GET /health HTTP/1.0\r\nHost: localhost\r\n\r\n")
            return sock.recv(5) == b"HTTP/"
    except OSError:
        return False
