"""Which workers their nanny killed for memory: a trial lost on one ran out of host memory.

When a worker's memory passes ``distributed.worker.memory.terminate`` (95% of its limit), its
nanny logs the event ``worker-restart-memory`` (``{"worker": address, "pid", "rss"}``) on the
scheduler and terminates it; the trial running there ends as a lost worker. The controller
subscribes to that topic (one push per kill, nothing polled), and, when a lost trial's worker is
not known yet, asks the scheduler's event log once (``Client.get_events``) before it judges.
A worker the kernel's OOM killer ends leaves no such event (see :func:`cluster.oom_forensics.host_out_of_memory`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from typing import TYPE_CHECKING, Any

from .way_out import on_loop

if TYPE_CHECKING:  # distributed loads with the first DaskExecutor
    from distributed import Client

__all__ = ["MEMORY_KILL_TOPIC", "MemoryKill", "MemoryKills"]

MEMORY_KILL_TOPIC = "worker-restart-memory"  # what distributed's nanny logs (distributed/worker_memory.py)
KEPT = 1000  # kills remembered at most (the oldest go first)

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class MemoryKill:
    """One worker process its nanny killed for memory: when, and its resident memory then (bytes)."""

    worker: str
    time: float
    rss: int
    pid: int | None = None


class MemoryKills:
    """The memory kills of a cluster's workers since this controller started listening."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._kills: dict[str, list[MemoryKill]] = {}
        try:
            client.subscribe_topic(MEMORY_KILL_TOPIC, self._on_event)
        except Exception as exc:  # noqa: BLE001 - without the stream, the look-up on a loss still works
            log.debug("cannot subscribe to %s: %s", MEMORY_KILL_TOPIC, exc)

    def _on_event(self, event: tuple[float, Any]) -> None:
        self._add(*event)

    def _add(self, when: float, msg: Any) -> None:
        if not isinstance(msg, dict) or not msg.get("worker"):
            return
        kill = MemoryKill(str(msg["worker"]), float(when), int(msg.get("rss") or 0), msg.get("pid"))
        with self._lock:
            kills = self._kills.setdefault(kill.worker, [])
            if kill not in kills:
                kills.append(kill)
            while sum(len(k) for k in self._kills.values()) > KEPT:
                oldest = min(self._kills, key=lambda w: self._kills[w][0].time)
                self._kills[oldest].pop(0)
                if not self._kills[oldest]:
                    del self._kills[oldest]

    def find(self, worker: str, since: float) -> MemoryKill | None:
        """The kill of ``worker`` at or after ``since`` (a trial's start), if its nanny logged one."""
        with self._lock:
            return next((k for k in self._kills.get(worker, ()) if k.time >= since), None)

    def lookup(self, worker: str, since: float) -> MemoryKill | None:
        """:meth:`find`, asking the scheduler's event log once when the stream has not brought it (yet)."""
        found = self.find(worker, since)
        if found is not None or not worker:
            return found
        try:
            for when, msg in self._client.get_events(MEMORY_KILL_TOPIC):
                self._add(when, msg)
        except Exception as exc:  # noqa: BLE001 - a scheduler that cannot answer: no kill known
            log.debug("get_events(%s) failed: %s", MEMORY_KILL_TOPIC, exc)
        return self.find(worker, since)

    def close(self) -> None:
        unsubscribe = functools.partial(self._client.unsubscribe_topic, MEMORY_KILL_TOPIC)
        on_loop(self._client.loop, unsubscribe, 5.0, "the Dask client did not unsubscribe from the memory kills")
