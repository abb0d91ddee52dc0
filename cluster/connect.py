"""Start an embedded Dask cluster or join an existing one: ``open_cluster`` opens whichever backend the options name.

Policy lives in the backends (``cluster.backends``: how many workers, which resources, which
addresses are safe); the mechanism is Dask's own ``LocalCluster``, ``Client`` and deploy projects.
The names other packages have always imported from here are kept.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from . import way_out
from .errors import ClusterError
from .options import LOOPBACK, ClusterOptions, TLSFiles, is_loopback
from .quiet_workers import quiet_dask_finalizers
from .resources import detect_gpus, slot_resource

if TYPE_CHECKING:
    from distributed import Client

__all__ = [
    "LOOPBACK",
    "ClusterError",
    "ClusterOptions",
    "TLSFiles",
    "detect_gpus",
    "is_loopback",
    "open_cluster",
    "quiet_dask_finalizers",
    "quiet_dask_logs",
    "scheduler_identity",
    "silent_for",
    "slot_resource",
    "worker_slots",
    "worker_nanny",
]

log = logging.getLogger(__name__)


def open_cluster(options: ClusterOptions, *, env: Mapping[str, str] | None = None) -> AbstractContextManager[Client]:
    """A context manager yielding a connected ``Client``; it closes whatever was started on exit, errors and Ctrl-C
    included. ``env``: extra environment for worker processes started on this machine."""
    from .backends import backend_of  # distributed loads here, not when a light command reads a spec

    way_out.end()  # a cluster opens: the way out of a campaign this process ran before is over
    backend = backend_of(options)
    if log.isEnabledFor(logging.INFO):  # a campaign's log says where its trials ran
        log.info("cluster: %s", backend.describe(options))
    return backend.open(options, env=env)


def quiet_dask_logs(level: int = logging.ERROR) -> None:
    """Hide Dask's start/stop chatter (INFO) in this process for good; errors still show."""
    for name in list(logging.root.manager.loggerDict):
        if name.split(".")[0] in ("distributed", "dask", "tornado"):
            logging.getLogger(name).setLevel(level)
    for name in ("distributed", "dask", "tornado"):
        logging.getLogger(name).setLevel(level)


def worker_slots(client: Client) -> dict[str, dict[str, float]]:
    """Each worker's declared resources, by worker address."""
    return {addr: dict(w.get("resources") or {}) for addr, w in _workers(client).items()}


def worker_memory_limits(client: Client) -> dict[str, int]:
    """Each worker's memory limit in bytes (0: none), by worker address."""
    return {addr: int(w.get("memory_limit") or 0) for addr, w in _workers(client).items()}


def worker_nanny(client: Client, worker: str) -> str:
    """The address of ``worker``'s nanny ("" when it runs without one or has left)."""
    return str((_workers(client).get(worker) or {}).get("nanny") or "")


def scheduler_identity(client: Client) -> dict[str, Any]:
    """The scheduler's identity (its address, every worker's record), fetched from the scheduler now.

    Not ``Client.scheduler_info``, a cache its own refresh empties of workers (see :func:`_workers`). Raises
    ``OSError`` when the scheduler does not answer (``TimeoutError`` after :data:`IDENTITY_TIMEOUT` s: a hung one).
    """
    asked = time.monotonic()
    try:
        info = dict(client.sync(client.scheduler.identity, n_workers=-1, callback_timeout=IDENTITY_TIMEOUT))
    except OSError:
        _UNANSWERED_SINCE.setdefault(client, asked)
        raise
    _UNANSWERED_SINCE.pop(client, None)
    return info


def silent_for(client: Client) -> float:
    """Seconds the scheduler has left ``client``'s :func:`scheduler_identity` unanswered, from the first ask it did
    not answer (0 once it answers: a long pause between asks is no silence)."""
    since = _UNANSWERED_SINCE.get(client)
    return 0.0 if since is None else time.monotonic() - since


def _workers(client: Client) -> dict[str, dict[str, Any]]:
    """Every worker's record, fetched from the scheduler now (not only the first few it sends by default).

    Not through ``Client.scheduler_info``: that returns the client's cached identity, which its own periodic refresh
    (every 2 s) overwrites with one that lists no worker at all, and which a fetch that fails leaves as it is. Under
    load a caller then read "no worker" from a cluster whose workers were all there (a trial "lost its worker" whose
    process lived on; a campaign refused for "no worker with a free slot"). A fetch that fails here gives the last
    full answer this client got, or raises ``OSError`` when there is none.
    """
    try:
        info = scheduler_identity(client)
    except OSError:
        known = _LAST_SEEN.get(client)
        if known is None:
            raise
        return known
    workers = dict(info.get("workers", {}))
    _LAST_SEEN[client] = workers
    return workers


#: Seconds a scheduler has to answer who it is: past them, it is asked again on the next look (a hung one is found
#: lost after the executor's ``lost_after`` seconds without an answer: :meth:`cluster.cluster_view.ClusterView.check`).
IDENTITY_TIMEOUT = 10.0
#: Since when each client's scheduler has not answered (monotonic seconds; none while it answers).
_UNANSWERED_SINCE: weakref.WeakKeyDictionary[Client, float] = weakref.WeakKeyDictionary()
#: Each client's last full list of workers (see :func:`_workers`).
_LAST_SEEN: weakref.WeakKeyDictionary[Client, dict[str, dict[str, Any]]] = weakref.WeakKeyDictionary()
