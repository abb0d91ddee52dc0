"""On a worker: a slot runner, one long-lived Dask task that holds a slot and runs the trials the controller sends it.

A trial as a Dask task of its own costs its slot the task's round trip between two trials (the worker tells the
scheduler, the scheduler starts the next task: ~2.5 ms a trial on 2 cores, more under load). A runner holds its slot
instead, and takes its trials from an inbox in its worker's process; the executor
(:mod:`cluster.runner_pool`) puts them there ahead of time, straight from the client to the worker (the
:data:`PUT_OP` handler, which :class:`cluster.plugins.SlotInboxes` adds to every worker), so the next trial is
waiting when the last one ends.

Each trial keeps a Dask task's guarantees: it says it started, reports and ends up the event stream as it would
(:func:`cluster.entrypoint.run_trial`), and it runs only once (:mod:`cluster.first_run`, under the key the executor
gave it, which a trial sent again elsewhere keeps). A runner ends when it is retired, or after ``idle`` seconds
with nothing to run (so a controller that went away leaves no slot held for long); the trials still in its inbox
then go back in its result, for the executor to place again.
"""

from __future__ import annotations

import collections
import logging
import re
import threading
import time
from typing import Any

import cloudpickle

from .entrypoint import run_trial
from .first_run import FirstRun, RanBefore, ask_early
from .outcome import Outcome, TrialStatus, error_type_of
from .worker_messages import RunnerReady, TrialEnded, send

__all__ = ["Inbox", "Item", "PUT_OP", "RUNNER_KEY", "Trial", "runner_key", "run_slot", "put_trials", "pack_item"]

log = logging.getLogger(__name__)

PUT_OP = "hypersweep_slot_put"  # the worker handler that takes trials for a runner
RUNNER_KEY = re.compile(r"-runner-\d+$")  # what :func:`runner_key` makes
RECENT = 8  # outcomes a runner returns with its result, for a trial whose outcome message did not arrive
_INBOXES: dict[str, Inbox] = {}  # this worker process's runners, by key
Item = tuple[str, bytes, bool]  # trials for a runner, run one after another (:func:`pack_item`)
Trial = tuple[int, Any, dict[str, Any], int]  # number, trainer shipment, config, expected device memory


def runner_key(topic: str, unique: int) -> str:
    """The Dask key of a slot runner of campaign ``topic`` (``unique``: apart from its other runners)."""
    return f"{topic}-runner-{unique}"


def pack_item(key: str, trials: list[Trial], fresh: bool) -> Item:
    """Trials as they travel to a runner, as one item: their first-run key, (pickled) each one's number, trainer
    shipment, config and expected device memory, and whether they are sent for the first time under that key
    (``fresh``: they cannot have run, so their runner does not ask).

    Several trials share an item (and a key) where the executor batches trials shorter than a message's round trip:
    one first-run mark for all, as a batch task has. A runner whose worker dies part-way through such an item leaves
    the rest of it to end lost, as a task would (the controller's retry policy decides)."""
    return key, cloudpickle.dumps(trials), fresh


class Inbox:
    """The trials waiting for one runner (taken in order), and whether it still takes any."""

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._items: collections.deque[Item] = collections.deque()
        self._closed = False
        self._retire = ""  # "drain": end when empty; "now": end after the running trial, handing the rest back

    def put(self, items: list[Item]) -> bool:
        """Queue ``items``; False when the runner has closed (they are not taken)."""
        with self._ready:
            if self._closed:
                return False
            self._items.extend(items)
            self._ready.notify()
            return True

    def retire(self, now: bool) -> None:
        with self._ready:
            self._retire = "now" if now else (self._retire or "drain")
            self._ready.notify()

    def take(self, idle: float) -> Item | None:
        """The next trial; None once retired (and, unless retired now, empty) or idle for ``idle`` s: the inbox is
        closed in the same step, so nothing put after that is lost."""
        deadline = time.monotonic() + idle
        with self._ready:
            while not self._items or self._retire == "now":
                left = deadline - time.monotonic()
                if self._retire or left <= 0:
                    self._closed = True
                    return None
                self._ready.wait(left)
            return self._items.popleft()

    def close(self) -> list[Item]:
        """Take no more; what was still waiting."""
        with self._ready:
            self._closed = True
            left, self._items = list(self._items), collections.deque()
            return left


def put_trials(worker: Any, runner: str, items: list[Any] | None = None, retire: str = "") -> str:
    """The :data:`PUT_OP` handler of ``worker`` (bound by the plugin): queue ``items`` for ``runner``, or retire it
    (``"now"`` or ``"drain"``). ``"ok"``, or ``"closed"`` when that runner takes nothing more (it ended, or it never
    started on this worker)."""
    inbox = _INBOXES.get(runner)
    if inbox is None:
        return "closed"
    if retire:
        inbox.retire(retire == "now")
        return "ok"
    trials: list[Item] = [(str(key), bytes(blob), bool(fresh)) for key, blob, fresh in items or ()]
    if not inbox.put(trials):
        return "closed"
    for key, _, fresh in trials:
        if not fresh:  # sent again: its first-run answer comes while it waits, as for a task queued at the worker
            ask_early(worker, key)
    return "ok"


def run_slot(key: str, topic: str, resource: str, share: float, headroom: float, idle: float) -> dict[str, Any]:
    """The runner's task: say it is ready, run what its inbox holds until retired or idle, hand back the rest.

    Its result: ``unrun`` (the first-run keys of the trials it did not run, to place again) and ``recent`` (the last
    few trials' outcomes, by number), or ``ran_before`` when Dask started it again after its worker died (it then
    runs nothing).
    """
    from distributed import get_worker

    try:
        FirstRun(key).check()
    except RanBefore:
        return {"ran_before": True, "unrun": [], "recent": {}}
    worker = get_worker()
    inbox = _INBOXES[key] = Inbox()
    recent: collections.OrderedDict[int, Outcome] = collections.OrderedDict()
    try:
        send(worker, topic, RunnerReady(key, worker.address, str(worker.id)))
        while (item := inbox.take(idle)) is not None:
            for number, outcome in _run_item(item, topic, resource, share, headroom):
                recent[number] = outcome
                if len(recent) > RECENT:
                    recent.popitem(last=False)
    finally:
        _INBOXES.pop(key, None)
        unrun = [trial for trial, _, _ in inbox.close()]
    return {"ran_before": False, "unrun": unrun, "recent": dict(recent)}


def _run_item(item: Item, topic: str, resource: str, share: float, headroom: float) -> list[tuple[int, Outcome]]:
    """Run an item's trials one after another, each as its own task would (:func:`cluster.task_runner.run_once`); their
    outcomes."""
    key, blob, fresh = item
    first_run = FirstRun(key, fresh)  # asked (if at all) once for the item, answered before its first trial
    return [_run_one(trial, first_run, topic, resource, share, headroom) for trial in cloudpickle.loads(blob)]


def _run_one(
    trial: Trial, first_run: FirstRun, topic: str, resource: str, share: float, headroom: float
) -> tuple[int, Outcome]:
    """Run one trial, sending an outcome the trial could not send itself (it ran before, or it failed outside its
    trainer) up the event stream."""
    from distributed import get_worker

    number, trainer, config, memory = trial
    try:
        return number, run_trial(trainer, config, topic, resource, 1, share, memory, headroom, first_run)
    except RanBefore:
        why = (
            "its worker died after it (or its batch) started there; it was sent again, and only the controller retries"
        )
        outcome = Outcome(TrialStatus.LOST, error=why)
    except Exception as exc:  # noqa: BLE001 - a failure outside the trainer (a device lease): this trial's only
        log.warning("trial %s failed outside its trainer: %s", number, exc)
        outcome = Outcome(TrialStatus.LOST, error=f"{type(exc).__name__}: {exc}", error_type=error_type_of(exc))
    send(get_worker(), topic, TrialEnded(number, outcome))
    return number, outcome
