"""``[cluster] backend = "address"``: join a running Dask scheduler, after checking that it is one; start nothing."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import os
import socket
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from .deployed import wait_for_first_worker
from .errors import ClusterError
from .options import Backend, ClusterOptions, scheduler_address
from .way_out import close_within

if TYPE_CHECKING:  # distributed loads when a cluster is opened, not when a light command reads a spec
    from distributed import Client
    from distributed.security import Security

__all__ = ["AddressBackend", "check_scheduler"]


@dataclasses.dataclass(frozen=True)
class AddressBackend(Backend):
    """Join the scheduler at ``options.address`` (``tcp://``, ``tls://`` or a scheduler JSON file); start nothing."""

    kind: ClassVar[str] = "address"
    joins_scheduler: ClassVar[bool] = True
    summary: ClassVar[str] = "join a running Dask scheduler (tcp://, tls:// or a scheduler file); start nothing"

    def describe(self, options: ClusterOptions) -> str:
        return f"the running Dask scheduler at {options.address}"

    @contextlib.contextmanager
    def open(self, options: ClusterOptions, *, env: Mapping[str, str] | None = None) -> Iterator[Client]:
        client = _connect(options)
        try:
            wait_for_first_worker(
                client,
                options.worker_timeout,
                f"no worker joined the scheduler at {options.address} within {options.worker_timeout:g}s "
                "(worker_timeout): start one with 'hypersweep worker ADDRESS'",
            )
            yield client
        finally:
            close_within(client, 10, f"the Dask client of the scheduler at {options.address} did not close")


def _connect(options: ClusterOptions) -> Client:
    kwargs: dict[str, Any] = {"timeout": options.connect_timeout, "security": options.security()}
    target = options.address
    if not target.startswith(("tcp://", "tls://", "inproc://", "ucx://")) and os.path.exists(target):
        kwargs["scheduler_file"] = target
        target = None  # type: ignore[assignment]
    from distributed import Client
    from distributed.security import Security

    address = scheduler_address(options.address)
    if "://" in address:
        check_scheduler(address, options.security() or Security(), options.connect_timeout)
    try:
        return Client(target, **kwargs) if target else Client(**kwargs)
    except (OSError, TimeoutError) as exc:
        raise ClusterError(
            f"cannot reach the Dask scheduler at {options.address!r} within {options.connect_timeout:g}s ({exc})"
        ) from exc


def check_scheduler(address: str, security: Security, timeout: float) -> None:
    """Raise ``ClusterError`` unless a Dask scheduler answers at ``address`` within ``timeout`` seconds.

    Dask's own ``Client`` bounds the TCP connect by its timeout but then waits for the scheduler's
    handshake for ever: something else on that port (an HTTP server, a dashboard port) would hang it.
    This asks the scheduler who it is, over Dask's own comm and ``security``, the whole exchange bounded.
    """

    async def identity() -> Any:
        from distributed.comm import connect

        comm = await connect(address, timeout=timeout, **security.get_connection_args("client"))
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    async def bounded() -> Any:
        return await asyncio.wait_for(identity(), timeout)

    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="hypersweep-check-scheduler")
    try:
        # A thread of its own: its own event loop, whatever the caller's thread runs.
        reply = pool.submit(asyncio.run, bounded()).result()
    except TimeoutError as exc:
        if _port_open(address):
            raise ClusterError(
                f"{address!r} accepts connections but gave no Dask answer within {timeout:g}s: is it a Dask "
                "scheduler's address (not an HTTP or dashboard port)?"
            ) from exc
        raise ClusterError(f"cannot reach the Dask scheduler at {address!r} within {timeout:g}s") from exc
    except OSError as exc:
        raise ClusterError(f"cannot reach the Dask scheduler at {address!r} within {timeout:g}s ({exc})") from exc
    except Exception as exc:  # noqa: BLE001 - whatever it sent back (read as frames), it is not a Dask scheduler
        raise ClusterError(
            f"{address!r} answered, but not in Dask's protocol ({type(exc).__name__} reading its answer): is it a "
            "Dask scheduler's address (not an HTTP or dashboard port)?"
        ) from exc
    finally:
        pool.shutdown(wait=False)
    kind = reply.get("type") if isinstance(reply, dict) else None
    if not isinstance(reply, dict) or kind in ("Worker", "Nanny"):
        what = f"a Dask {kind.lower()}" if kind else "something that speaks Dask's protocol"
        raise ClusterError(f"{address!r} is {what}, not a scheduler: give the scheduler's address")


def _port_open(address: str, timeout: float = 0.5) -> bool:
    from urllib.parse import urlsplit

    parts = urlsplit(address)
    try:
        with socket.create_connection((parts.hostname or "", parts.port or 0), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False
