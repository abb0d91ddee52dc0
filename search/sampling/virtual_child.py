"""A sampler child process, modelled for a campaign on virtual time (the simulated cluster).

On a real cluster the built-in ``tpe`` and ``gp`` sample in a child process on a replica study
(:mod:`search.sampling.process`), on a core of their own. A simulated campaign cannot run one: its clock is
the controller's real time, and a second process's asks would land on it at random. So the simulation asked
on the loop, and charged the sampler's whole time to the controller, which a real campaign does not pay.

Here the child's part runs in the controller's process, in order, with the real child's code:

- the child's replica (:class:`~search.sampling.process._Replica`, the campaign's sampler unpickled) asks,
  and records every tell, as the child does;
- the controller's study gets the child's parameters through the real
  :class:`~search.sampling.process.ReplaySampler`, and every message is pickled and unpickled as the pipe
  would carry it (the controller's share of that is its own time);
- the child's time is handed to the ``core`` (the simulated executor), which takes it off the controller's
  clock and queues it on the child's core: an ask is done when that core has done everything before it, and
  the trial it makes starts no earlier (:meth:`SamplerCore.params_ready`).

A trial is asked when a slot needs one (the loop's own order, so a campaign is as deterministic as an inline
one); a real child asks a few ahead, so the model is, if anything, slower to fill a slot.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

import optuna
from optuna.distributions import BaseDistribution

from search.sampling.asker import AskTimes
from search.sampling.process import Done, ReplaySampler, Suggest, _Replica, replica_inputs

__all__ = ["SamplerCore", "VirtualChildAsker"]

T = TypeVar("T")


class SamplerCore(Protocol):
    """Where the modelled child's time goes (:class:`cluster.simulated.SimulatedExecutor`)."""

    def sampler_work(self, seconds: float) -> float:
        """``seconds`` of real time just spent on the child's work: off the controller's clock, onto the child's
        core; returns the virtual time that work is done."""
        ...

    def params_ready(self, number: int, at: float) -> None:
        """Trial ``number`` was sampled by virtual time ``at``: it starts no earlier."""
        ...


class VirtualChildAsker(Generic[T]):
    """The :class:`~search.sampling.process.ProcessAsker` of a real cluster, in process and on virtual time."""

    background = False
    asks_here = True  # asked by the loop when a slot needs a trial, in order

    def __init__(
        self,
        study: optuna.Study,
        distributions: dict[str, BaseDistribution],
        produce: Callable[[int], T],
        number_of: Callable[[T], int],
        core: SamplerCore,
        suggest: Suggest | None = None,
    ) -> None:
        self._study = study
        self._produce = produce
        self._number_of = number_of
        self._core = core
        self.times = AskTimes()  # of the child's asks
        started = time.perf_counter()
        sampler_bytes, directions, finished = replica_inputs(study)  # what a real child is started with
        self._replica = _Replica(pickle.loads(sampler_bytes), directions, distributions, finished, suggest)
        core.sampler_work(time.perf_counter() - started)  # the child's start, on its own core
        self._replay = ReplaySampler(distributions, self._send_done)
        study.sampler = self._replay

    def want(self, n: int, wake_at: int = 1) -> None:
        """Nothing is asked ahead: the loop asks when a slot needs a trial."""

    def take(self) -> T | None:
        return None

    def ask_here(self) -> T | None:
        """The child's ask (its time on the child's core), then the controller's trial from its parameters."""
        started = time.perf_counter()
        message = pickle.dumps(("asked", self._replica.ask()))
        ready = self._core.sampler_work(time.perf_counter() - started)
        asked = pickle.loads(message)[1]  # the controller receives it
        self.times.record(asked.seconds)
        self._replay.stage(asked)
        item = self._produce(asked.saw)
        self._core.params_ready(self._number_of(item), ready)
        return item

    def in_hand(self) -> int:
        return 0

    def close(self, timeout: float = 30.0) -> list[T]:
        """The campaign's study gets the child's sampler back, as after a real child's last state."""
        self._study.sampler = pickle.loads(pickle.dumps(self._replica.study.sampler))
        return []

    def _send_done(self, done: Done) -> None:
        """A tell: pickled by the controller; unpickled and recorded by the child, on its core."""
        message = pickle.dumps(("done", done))
        started = time.perf_counter()
        self._replica.record(pickle.loads(message)[1])
        self._core.sampler_work(time.perf_counter() - started)
