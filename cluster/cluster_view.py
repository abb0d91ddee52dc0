"""The cluster as an executor sees it: its slots (looked at once a second), whether its scheduler is still there,
and the demand the campaign leaves on it for a job keeper."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .connect import ClusterError, silent_for, worker_memory_limits, worker_slots
from .executor_api import Slots
from .jobs import DEMAND_KEY
from .outcome import Outcome, TrialStatus

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["ClusterView", "SLOTS_TTL"]

log = logging.getLogger(__name__)

SLOTS_TTL = 1.0  # seconds between fresh looks at the cluster's workers
SHARE_EPS = 1e-9


class ClusterView:
    """One executor's view of its cluster. ``resource``: what a slot is counted in (``GPU`` where any worker has
    one, else ``CPU``, unless given); ``gpus``: of a GPU, what one trial slot is; ``lost_after``: seconds the
    scheduler may be unreachable before the campaign gives up on it; ``follows_demand``: the cluster scales with
    the campaign (:meth:`want` leaves the demand on the scheduler)."""

    def __init__(
        self, client: Client, resource: str | None, gpus: float, lost_after: float, follows_demand: bool
    ) -> None:
        self._client = client
        self.resource = resource or self._infer_resource()
        self.share = gpus if self.resource == "GPU" else 1.0  # of the resource, what one slot is
        self.address = str(getattr(client.scheduler, "address", "") or "the scheduler")
        self.memory_limits: dict[str, int] = {}  # each worker's memory limit (bytes), as of the last look
        self._lost_after = lost_after
        self._follows_demand = follows_demand
        self._disconnected_since: float | None = None
        self._slots: Slots | None = None
        self._slots_at = 0.0
        self._wanted: dict[str, Any] = {}  # the demand last left on the scheduler

    def _infer_resource(self) -> str:
        names = {name for res in worker_slots(self._client).values() for name in res}
        return "GPU" if "GPU" in names else "CPU"

    def slots(self) -> Slots:
        """The cluster's slots; asked from the scheduler at most once per ``SLOTS_TTL`` seconds.

        ``Client.scheduler_info`` is a round trip carrying every worker's record, so
        asking it on every loop iteration would cost the controller more than a trial.
        """
        self.check()
        now = time.monotonic()
        if self._slots is None or now - self._slots_at > SLOTS_TTL:
            owned = [res.get(self.resource, 0) for res in worker_slots(self._client).values()]
            per_worker = [int(amount / self.share + SHARE_EPS) for amount in owned]
            self.memory_limits = worker_memory_limits(self._client)
            self._slots = Slots(self.resource, sum(per_worker), max(per_worker, default=0), len(per_worker))
            self._slots_at = now
        return self._slots

    def check(self) -> None:
        """Raise :class:`ClusterError` once the scheduler has been unreachable or silent (hung: it holds its
        connections and answers nothing) for ``lost_after`` s (or the client closed)."""
        if (silent := silent_for(self._client)) > self._lost_after:
            raise ClusterError(
                f"the Dask scheduler at {self.address} has not answered for {silent:.0f}s (hung, or its node lost)"
            )
        status = self._client.status
        if status == "running":
            self._disconnected_since = None
            return
        now = time.monotonic()
        if self._disconnected_since is None:
            self._disconnected_since = now
        if status in ("closed", "closing") or now - self._disconnected_since > self._lost_after:
            raise ClusterError(f"lost the Dask scheduler at {self.address} (client {status})")

    def check_lost(self, outcomes: Sequence[Outcome]) -> None:
        """Raise :class:`ClusterError` when trials ended lost or cancelled because the scheduler went away, not the
        trials: leave them to `resume`, do not record a failure."""
        lost = (TrialStatus.LOST, TrialStatus.CANCELLED)
        if any(o.status in lost for o in outcomes) and self._client.status != "running":
            raise ClusterError(f"lost the Dask scheduler at {self.address} (client {self._client.status})")

    def want(self, slots: int, busy: Callable[[], list[str]]) -> None:
        """Leave the campaign's demand on the scheduler (:data:`~cluster.jobs.DEMAND_KEY`: the slots, and the
        workers whose slot runners hold a trial, ``busy()``), when it changed: a job keeper scales its jobs by it."""
        if not self._follows_demand:  # a cluster of fixed size: no scheduler round trip per launched trial
            return
        demand = {"slots": slots, "busy": busy()}
        if demand == self._wanted:
            return
        try:
            self._client.sync(
                self._client.scheduler.set_metadata, keys=list(DEMAND_KEY), value=demand, callback_timeout=5
            )
        except Exception:  # noqa: BLE001 - no answer now: told again on the next call
            log.debug("could not leave the demand %s on the scheduler", demand, exc_info=True)
            return
        self._wanted = demand
