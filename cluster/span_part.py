"""What runs on each worker for one part of a trial wider than a worker (see :mod:`cluster.span`).

Every part leases its devices, then the part holding rank 0 opens the rendezvous store
on its worker's host address and publishes ``host:port`` (a named ``distributed.Variable``);
the other parts wait for it. Each part then starts its ranks (:func:`trainers.ddp.launch_part`)
with the trial's own config (so the same seed) and watches the trial's abort event: when any
part fails, or the controller ends the trial (a stop it must enforce, a lost worker), every
part ends its ranks. Rank 0's part carries the reports and the stop request (rank 0 broadcasts
it to every rank at each epoch end). Each part returns an :class:`~cluster.outcome.Outcome` like a
one-worker trial's, with ``ranks``: each of its ranks' own timings.
"""

from __future__ import annotations

import faulthandler
import signal
import time
from pathlib import Path
from typing import Any

from distributed import Event, Variable, get_worker
from distributed.comm import get_address_host

from .channel import WorkerReporter
from .entrypoint import TrainerShipment, _finite_metrics, _lease_devices, failure_of, ran_here, returned
from .first_run import FirstRun
from .outcome import Outcome, TrialStatus
from .trial_output import make_trial_folders, route_output
from .worker_messages import PartStarted, send

__all__ = ["run_part", "abort_event_name", "rendezvous_name", "abort_why_name", "RENDEZVOUS_TIMEOUT"]

RENDEZVOUS_TIMEOUT = 600.0  # seconds a part waits for rank 0's part to publish the store (it may queue for slots)
WATCH_SECONDS = 0.5  # how often a running part looks at the abort event


def abort_event_name(key: str) -> str:
    return f"{key}-abort"


def abort_why_name(key: str) -> str:
    return f"{key}-abort-why"


def rendezvous_name(key: str) -> str:
    return f"{key}-rendezvous"


def _published_name(key: str) -> str:
    return f"{key}-rendezvous-set"  # an Event: waiting on it with a timeout logs nothing on the scheduler


def abort(key: str, why: str, client: Any = None) -> None:
    """End every part of the span ``key`` (from a part, or from the controller with its ``client``)."""
    Variable(abort_why_name(key), client=client).set(why)
    Event(abort_event_name(key), client=client).set()


class _Watch:
    """The reason this part must end now ('' while it may go on), looked up every ``WATCH_SECONDS``."""

    def __init__(self, key: str) -> None:
        self._key = key
        self._event = Event(abort_event_name(key))
        self._checked = 0.0

    def __call__(self) -> str:
        now = time.monotonic()
        if now - self._checked < WATCH_SECONDS:
            return ""
        self._checked = now
        if not self._event.is_set():
            return ""
        try:
            return str(Variable(abort_why_name(self._key)).get(timeout=5))
        except Exception:  # noqa: BLE001 - the reason is a courtesy; the abort stands
            return "another part of the trial ended"


def _rendezvous(key: str, part: dict[str, Any], host: str, watch: _Watch) -> tuple[str, int, Any]:
    """(master address, port, the store this part hosts or None)."""
    from trainers.ddp_span import host_store  # torch, at run time only

    if part["first_rank"] == 0:
        store = host_store(host, int(part["world"]))
        Variable(rendezvous_name(key)).set(f"{host}:{store.port}")
        Event(_published_name(key)).set()
        return host, int(store.port), store
    deadline = time.monotonic() + float(part.get("timeout", RENDEZVOUS_TIMEOUT))
    published = Event(_published_name(key))
    while time.monotonic() < deadline:
        why = watch()
        if why:
            raise RuntimeError(f"the trial ended before its rendezvous: {why}")
        if not published.wait(timeout=1):
            continue
        master, _, port = str(Variable(rendezvous_name(key)).get(timeout=30)).rpartition(":")
        return master, int(port), None
    raise TimeoutError(
        f"rank 0's part did not publish the rendezvous within {part.get('timeout', RENDEZVOUS_TIMEOUT)} s"
    )


def run_part(
    trainer: TrainerShipment | str,
    config: dict[str, Any],
    topic: str,
    resource: str,
    part: dict[str, Any],
    first_run: FirstRun | None = None,
) -> Outcome:
    """Run part ``part["index"]`` (ranks ``first_rank .. first_rank + local - 1`` of ``world``) of a wide trial.

    A part Dask runs again (its worker died) ends at once (``first_run``), before it joins the rendezvous.
    """
    if first_run is not None:
        first_run.check()
    from trainers.api import TrialConfig, running_trainer  # at run time only
    from trainers.ddp import launch_part
    from trainers.ddp_span import RankSpan

    from .warm_pool_plugin import WarmPool

    started = time.time()
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1 <worker pid>: every thread's stack
    worker = get_worker()
    WarmPool.attach(worker)  # the part's ranks come from this worker's warm pool
    key, number = str(part["key"]), int(config["number"])
    reporter = WorkerReporter(topic, number)
    send(worker, topic, PartStarted(number, int(part["index"]), started))
    host = get_address_host(worker.address)
    lease, pool = _lease_devices(resource, int(part["local"]), 1.0, 0, 0.9)  # whole GPUs: a part packs with nothing
    devices = lease.ids if lease is not None else ()
    make_trial_folders(config)  # for its checkpoints; the controller does not make it
    output = route_output(config.get("log_dir"), number)
    metrics: dict[str, float] = {}
    values: tuple[float, ...] = ()
    timings: list[dict[str, Any]] = []
    failure: dict[str, Any] = {}
    watch = _Watch(key)
    store = None
    try:
        master, port, store = _rendezvous(key, part, host, watch)
        span = RankSpan(int(part["world"]), int(part["first_rank"]), int(part["local"]), master, port, host)
        shipment = trainer if isinstance(trainer, TrainerShipment) else TrainerShipment(trainer)
        fit = shipment.load()
        trial_config = TrialConfig.from_dict({**config, "devices": devices})
        log_dir = Path(config["log_dir"]) if config.get("log_dir") else None
        with running_trainer(shipment.entry, fit):
            result, timings = launch_part(fit, trial_config, reporter, span, watch=watch, log_dir=log_dir)
            metrics, values = returned(result)
    except Exception as exc:  # noqa: BLE001 - a failed part is an outcome; every other part is ended too
        failure = failure_of(exc)
        output.write(failure["traceback"])
        try:
            abort(key, f"part {part['index']} on {worker.address} failed: {failure['error']}")
        except Exception:  # noqa: BLE001 - the controller ends the others when this outcome arrives
            pass
    finally:
        output.close()
        if pool is not None and lease is not None:
            pool.give(lease)
        store = None  # noqa: F841 - rank 0's part closes the store with the trial
    return Outcome(
        TrialStatus.ERROR if failure else TrialStatus.OK,
        _finite_metrics(metrics),
        **ran_here(worker.address, devices, started),
        values=values,
        history=tuple(reporter.history),
        stopped=reporter.stopped,
        ranks=tuple(timings),
        **failure,
    )
