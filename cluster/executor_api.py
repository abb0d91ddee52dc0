"""What the controller and an executor say to each other: a :class:`TrialRequest` goes in, events come out
(:class:`Started`, :class:`Report`, :class:`Query`, :class:`Finished` with the trial's
:class:`~cluster.outcome.Outcome`), and :class:`TrialExecutor` is the protocol every executor satisfies (the Dask one,
:class:`cluster.executor.DaskExecutor`, and the simulator on virtual time)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

# torch-free: the trial's config crosses this seam typed
from trainers.api import TrialConfig

from .outcome import Outcome
from .trial_cost import TrialPredictions

__all__ = [
    "TrialRequest",
    "Started",
    "Report",
    "Finished",
    "Query",
    "Event",
    "Slots",
    "TrialExecutor",
    "BatchingExecutor",
]


@dataclasses.dataclass(frozen=True)
class TrialRequest:
    """One trial to run: the trainer, its config, its width in slots.

    ``trainer``: an entry ``"module:function"``, or the function itself. A function, or an
    entry registered in this process (``trainers.api.register_trainer``) or naming ``__main__``,
    goes to the workers by value (pickled as Dask pickles callables: cloudpickle, so a function
    defined in a script or a notebook works); any other entry goes by name, with the folders
    it was looked for in here (``trainers.api.trainer_folders``: the spec's folder, the current
    directory), which the worker puts on its path first. ``config`` may be given as the dict
    :meth:`TrialConfig.to_dict` writes; it is checked and kept as a :class:`TrialConfig`.
    ``prefer``: a worker address to queue it at (the one expected to free a slot first); a hint
    only, any worker may still run it. ``start_epoch``: the epoch this run resumes at, as the controller
    knows it (a later segment's start, the checkpoint a lost run left; 0: from scratch), so that what it
    has left, epochs ``start_epoch + 1`` to ``config.epochs``, is what a batch job's walltime is weighed
    against (:mod:`cluster.walltimes`).
    """

    number: int
    trainer: str | Callable[..., Any]
    config: TrialConfig
    width: int = 1
    prefer: str = ""
    start_epoch: int = 0

    def __post_init__(self) -> None:
        if self.width < 1:
            raise ValueError(f"width={self.width!r}: a trial needs at least one slot")
        if not isinstance(self.config, TrialConfig):
            object.__setattr__(self, "config", TrialConfig.from_dict(self.config))
        if not 0 <= self.start_epoch <= self.config.epochs:
            raise ValueError(
                f"start_epoch={self.start_epoch!r}: must be in 0..epochs ({self.config.epochs}), the epoch a run resumes at"
            )


@dataclasses.dataclass(frozen=True)
class Report:
    """An intermediate report sent by a running trial."""

    number: int
    step: int
    metrics: Mapping[str, float]
    time: float
    worker: str


@dataclasses.dataclass(frozen=True)
class Started:
    """A trial began running on a worker (it may have waited in the queue for a slot)."""

    number: int
    time: float
    worker: str


@dataclasses.dataclass(frozen=True)
class Finished:
    """A trial ended, and how."""

    number: int
    outcome: Outcome


@dataclasses.dataclass(frozen=True)
class Query:
    """A running trial asks the controller (a define-by-run suggestion); ``reply(answer)`` sends the answer back."""

    number: int
    question: Mapping[str, Any]
    time: float
    reply: Callable[[Mapping[str, Any]], object]


Event = Started | Report | Finished | Query


@dataclasses.dataclass(frozen=True)
class Slots:
    """The cluster's slot capacity right now."""

    resource: str
    total: int
    widest: int
    workers: int


class TrialExecutor(Protocol):
    """What the controller needs from whatever runs trials.

    Abilities, declared as attributes: ``supports_batch`` (it has ``submit_batch``: several
    trials as one task), ``virtual_time`` (its clock is simulated, so the controller must
    not sample on another thread: virtual time would not wait for it).
    """

    supports_batch: bool
    virtual_time: bool

    def slots(self) -> Slots: ...

    def submit(self, request: TrialRequest) -> None: ...

    def stop(self, number: int) -> None: ...

    def kill(self, number: int, worker: str) -> bool:
        """End trial ``number``, running on ``worker``, which did not answer ``stop``: its task is
        cancelled (no re-run elsewhere) and the worker's processes are killed and restarted, so every
        other trial running there ends too (its ``Finished`` says lost or cancelled). False when this
        executor cannot (the worker has no nanny to restart it, or the trial is not running)."""
        ...

    def events(self, timeout: float) -> list[Event]: ...

    def wake(self) -> None:
        """Make a waiting ``events`` call return now (callable from any thread)."""
        ...

    def want(self, slots: int) -> None:
        """The campaign could use ``slots`` slots now (those its running trials hold and those its waiting trials
        need): a cluster that grows and shrinks (a job backend's ``minimum_jobs < maximum_jobs``) follows it."""
        ...

    def predict_with(self, costs: TrialPredictions) -> None:
        """Read the campaign's trial model from now on (its campaign hands it over when it is built): whatever the
        executor predicts (a trial's duration against its batch job's walltime, its device memory) it reads there,
        from the one instance the campaign feeds, and it keeps no model of its own."""
        ...

    def close(self) -> None: ...


class BatchingExecutor(TrialExecutor, Protocol):
    """An executor that can run several trials, one after another, as one task on ``width`` slots."""

    def submit_batch(self, requests: Sequence[TrialRequest]) -> None: ...
