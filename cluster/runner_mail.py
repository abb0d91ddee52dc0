"""What the executor sends slot runners (:mod:`cluster.slot_runner`): trials, and orders to retire, straight from
the client to each runner's worker (its :data:`~cluster.slot_runner.PUT_OP` handler), never through the scheduler."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .executor_queue import EventQueue, RunnerRefused
from .slot_runner import PUT_OP, Trial, pack_item

if TYPE_CHECKING:
    from distributed import Client

    from .executor_api import TrialRequest

__all__ = ["Placement", "RunnerMail"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Placement:
    """A one-slot trial to run: its request, its first-run key (kept when it is sent again; the trials of a batch share
    one, and go to one runner together), its expected memory, and whether it was never sent under that key
    (``fresh``: it cannot have run, so nothing asks whether it did)."""

    request: TrialRequest
    key: str
    memory: int = 0
    fresh: bool = True

    @property
    def number(self) -> int:
        return int(self.request.number)


class RunnerMail:
    """The post to one executor's runners (its client, trainer shipments and queue: a runner that takes none of
    the trials sent to it puts a :class:`~cluster.executor_queue.RunnerRefused` there)."""

    def __init__(self, client: Client, ship: Callable[[Any], Any], events: EventQueue) -> None:
        self._client, self._ship, self._events = client, ship, events

    def send(self, runner: str, worker: str, batch: list[Placement]) -> None:
        """Send ``batch`` to ``runner`` on ``worker`` in one message: an item per first-run key (a batch's trials
        share one)."""
        by_key: dict[str, list[Placement]] = {}
        for placement in batch:
            by_key.setdefault(placement.key, []).append(placement)
        items = [
            pack_item(key, [self._trial(p) for p in group], all(p.fresh for p in group))
            for key, group in by_key.items()
        ]
        numbers = [p.number for p in batch]
        sent = self._put(worker, runner=runner, items=items)
        sent.add_done_callback(functools.partial(self._sent, runner=runner, numbers=numbers))

    def retire(self, runner: str, worker: str, now: bool) -> concurrent.futures.Future[Any]:
        """Tell ``runner`` to end: ``now`` after its running trial, handing back the rest; else once its inbox is
        empty."""
        return self._put(worker, runner=runner, retire="now" if now else "drain")

    def _trial(self, placement: Placement) -> Trial:
        request = placement.request
        return placement.number, self._ship(request.trainer), request.config.to_dict(), placement.memory

    def _put(self, worker: str, **message: Any) -> concurrent.futures.Future[Any]:
        """Send ``message`` to ``worker``'s :data:`PUT_OP` handler over the client's connections (returns at once)."""

        async def put() -> Any:
            return await getattr(self._client.rpc(worker), PUT_OP)(**message)

        loop: Any = self._client.loop  # tornado's IOLoop over the client's asyncio loop
        return asyncio.run_coroutine_threadsafe(put(), loop.asyncio_loop)

    def _sent(self, future: concurrent.futures.Future[Any], runner: str, numbers: list[int]) -> None:
        error = future.exception()
        if error is None and future.result() == "ok":
            return
        log.debug("runner %s took no trials %s (%s)", runner, numbers, error or future.result())
        self._events.put(RunnerRefused(runner, tuple(numbers)))
