"""The executor's side of trials wider than a worker: submit the parts, follow them, end them together.

:class:`DaskExecutor` hands a request wider than its widest worker to :class:`SpanRunner`
(see :mod:`cluster.span` for the placement rule). Part events come back on the executor's
queue; the runner turns them into the trial's one ``Started`` (when its last part starts)
and one ``Finished`` (when every part has ended). A part that fails, or whose worker leaves
the cluster, ends every other part (the trial's abort event); a part still waiting for its
slots is cancelled then.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .connect import worker_slots
from .executor_queue import EventQueue, PartDone, SpanCancelled
from .outcome import Outcome, TrialStatus
from .span import SpanPlacer, SpanTrial, merge_outcomes, plan_parts, scheduler_capacity

if TYPE_CHECKING:  # distributed loads with the first DaskExecutor (status and check never import it)
    from distributed import Client

    from .executor_api import TrialRequest

__all__ = ["SpanRunner"]


def _parts() -> Any:
    """:mod:`cluster.span_part` (it imports distributed: loaded when a wide trial is placed)."""
    from . import span_part

    return span_part


log = logging.getLogger(__name__)

CHECK_SECONDS = 1.0  # between looks at whether every part's worker is still there


class SpanRunner:
    """Wide trials of one executor (its client, topic, resource, event queue and trainer shipments)."""

    def __init__(
        self,
        client: Client,
        topic: str,
        resource: str,
        events: EventQueue,
        ship: Callable[[Any], Any],
        run_once: Callable[..., Any],
    ) -> None:
        self._client, self._topic, self._resource = client, topic, resource
        self._queue, self._ship, self._run_once = events, ship, run_once
        self._placer = SpanPlacer(self._place)
        self._checked = 0.0
        self._missing: set[str] = set()  # parts' workers the last look did not find

    def has(self, number: int) -> bool:
        return number in self._placer.trials or any(r.number == number for r in self._placer.waiting())

    def running(self) -> tuple[int, ...]:
        return tuple(self._placer.trials) + tuple(r.number for r in self._placer.waiting())

    def submit(self, request: TrialRequest) -> None:
        self._placer.submit(request)

    def _place(self, request: TrialRequest) -> SpanTrial:
        try:
            capacity = scheduler_capacity(self._client, self._resource)
        except Exception as exc:  # noqa: BLE001 - a scheduler that refuses the probe: plan on declared slots
            log.debug("scheduler capacity probe failed (%s); planning on declared slots", exc)
            capacity = {w: (float(r.get(self._resource, 0)), 0.0) for w, r in worker_slots(self._client).items()}
        key = f"{self._topic}-span-{request.number}-{time.monotonic_ns()}"
        try:
            parts = plan_parts(capacity, request.width)
        except ValueError as exc:  # workers left since the campaign checked: the trial cannot be placed now
            trial = SpanTrial(request.number, key, [])
            trial.aborted = f"lost: {exc}"
            self._queue.put(SpanCancelled(request.number, trial.aborted))
            return trial
        trial = SpanTrial(request.number, key, parts)
        shipment = self._ship(request.trainer)
        config = request.config.to_dict()
        for index, part in enumerate(trial.parts):
            spec = {
                "key": key,
                "index": index,
                "first_rank": part.first_rank,
                "local": part.local,
                "world": request.width,
            }
            future = self._client.submit(
                self._run_once,
                f"{key}-part{index}",
                _parts().run_part,
                [request.number],
                shipment,
                config,
                self._topic,
                self._resource,
                spec,
                key=f"{key}-part{index}",
                resources={self._resource: part.local},
                workers=[part.worker],
                allow_other_workers=False,
                pure=False,
            )
            future.add_done_callback(lambda _f, n=request.number, i=index: self._queue.put(PartDone(n, i)))
            trial.futures.append(future)
        log.info(
            "trial %d spans %d workers: %s",
            request.number,
            len(trial.parts),
            ", ".join(f"{p.worker} ranks {p.first_rank}..{p.first_rank + p.local - 1}" for p in trial.parts),
        )
        return trial

    # --- events -------------------------------------------------------------------------------------

    def part_started(self, number: int, part: int, at: float) -> list[tuple[int, float, str]]:
        """Part ``part`` of trial ``number`` began at ``at``; the trial's (number, time, rank 0's worker) once its
        last part has."""
        trial = self._placer.trials.get(number)
        if trial is None or trial.all_started:
            return []
        trial.started[part] = at
        if not trial.all_started:
            return []
        self._placer.next()
        return [(trial.number, max(trial.started.values()), trial.parts[0].worker)]

    def part_done(self, number: int, index: int) -> Outcome | None:
        """A part's task ended; the trial's merged outcome once every part has (else None)."""
        trial = self._placer.trials.get(number)
        if trial is None or index in trial.outcomes:
            return None
        outcome = self._part_outcome(trial, index)
        trial.outcomes[index] = outcome
        if not outcome.ok and trial.first_failure is None and not trial.aborted:
            trial.first_failure = index
            self._abort(trial, f"part {index} on {trial.parts[index].worker} ended: {outcome.error}")
        if not trial.done:
            return None
        self._placer.forget(number)
        return merge_outcomes(trial)

    def _part_outcome(self, trial: SpanTrial, index: int) -> Outcome:
        from distributed import CancelledError
        from distributed.client import FutureCancelledError

        future = trial.futures[index]
        try:
            return future.result(timeout=30)
        except (CancelledError, FutureCancelledError):
            status = TrialStatus.LOST if trial.aborted.startswith("lost") else TrialStatus.CANCELLED
            return Outcome(status, error=trial.aborted or "cancelled")
        except Exception as exc:  # noqa: BLE001 - its worker is gone
            return Outcome(TrialStatus.LOST, error=f"{type(exc).__name__}: {exc}".splitlines()[0])

    def check_workers(self) -> None:
        """A part whose worker left the cluster (not found in two looks in a row): every part of its trial ends (the
        pinned task would wait forever), and the trial is lost, whatever ended first: the other parts' ranks fail
        at once when a peer dies (gloo: connection reset), before a second look, but their worker did not leave."""
        now = time.monotonic()
        if not self._placer.trials or now - self._checked < CHECK_SECONDS:
            return
        self._checked = now
        present = set(worker_slots(self._client))
        missing: set[str] = set()  # missing from two looks in a row (self._missing too): one look may be torn
        confirmed = self._missing
        for trial in list(self._placer.trials.values()):
            absent = [i for i, p in enumerate(trial.parts) if p.worker not in present and i not in trial.outcomes]
            missing.update(trial.parts[i].worker for i in absent)
            gone = [i for i in absent if trial.parts[i].worker in confirmed]
            if not gone:
                continue
            why = f"lost: worker {trial.parts[gone[0]].worker} of part {gone[0]} left the cluster"
            trial.first_failure = gone[0]
            if trial.aborted:
                trial.aborted = why  # a part that failed first failed of this loss: its gone parts end lost
            else:
                self._abort(trial, why)
            self._client.cancel([trial.futures[i] for i in gone], force=True)
        self._missing = missing

    # --- ending -------------------------------------------------------------------------------------

    def stop_waiting(self, number: int) -> bool:
        """A trial not placed yet: dropped, so it ends as cancelled; True when it was waiting."""
        request = self._placer.drop_waiting(number)
        if request is None:
            return False
        self._queue.put(SpanCancelled(number, "cancelled before it was placed"))
        return True

    def kill(self, number: int) -> bool:
        """End every part of trial ``number`` now (their ranks are killed by their parts)."""
        trial = self._placer.trials.get(number)
        if trial is None:
            return self.stop_waiting(number)
        self._abort(trial, "killed by the controller")
        self._client.cancel([f for i, f in enumerate(trial.futures) if i not in trial.started], force=True)
        return True

    def _abort(self, trial: SpanTrial, why: str) -> None:
        trial.aborted = why
        try:
            _parts().abort(trial.key, why, client=self._client)
        except Exception as exc:  # noqa: BLE001 - a lost scheduler: the executor raises on its own check
            log.debug("abort of trial %d failed: %s", trial.number, exc)
        pending = [f for i, f in enumerate(trial.futures) if i not in trial.started and i not in trial.outcomes]
        if pending:  # parts still waiting for their slots would start only to end at once
            self._client.cancel(pending, force=True)

    def close(self) -> list[Any]:
        """Every part future, for the executor to cancel."""
        return [f for trial in self._placer.trials.values() for f in trial.futures]

    def forget(self, number: int) -> None:
        """A trial that ended without parts (never placed)."""
        if number in self._placer.trials and not self._placer.trials[number].parts:
            self._placer.forget(number)
