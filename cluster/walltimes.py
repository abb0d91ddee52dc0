"""Which workers have the time to run a given trial before their batch job's walltime ends.

A :class:`~cluster.jobs.JobKeeper` records each worker's job end on the scheduler (:func:`cluster.jobs.job_deadlines`);
the slot runners (:mod:`cluster.runner_pool`) give a worker a trial only when the trial is predicted to end before
the job does, after the trials queued before it there. A trial's prediction is the campaign's trial model's
(:class:`~cluster.trial_cost.TrialPredictions`, handed to the executor by its campaign) for its parameters, width and
epochs: its mean, as the time budget's placement (``search.loop.placement``) takes it. A run that resumes at epoch
``k`` of ``n`` (:attr:`~cluster.executor_api.TrialRequest.start_epoch`: a later segment, a run cut by its job's
walltime or lost, a resumed campaign's) is predicted for what it has left: ``(n - k) / n`` of its full run, each epoch
taken to cost the same. The mean and not the 90%
upper bound: a trial cut by its job's walltime resumes from its checkpoint on another job and spends no retry, while
one refused waits for another job with its slot idle; and with few runs seen the upper bound is twice the mean (one
run: a factor of 2), which would refuse trials on every job shorter than twice them. Where the model knows nothing
of a trial, the median of the recent runs stands in for it; before any run ended, every trial fits. A worker of no
batch job always has the time. A trial predicted to outlast every job (longer than the most time left a job was
seen with) would wait for ever: it starts on a job that has at least :data:`FRESH` of that time left, and runs in
pieces, resumed from its checkpoint at each job's end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from .executor_api import TrialRequest
from .jobs import POLL_SECONDS
from .trial_cost import Basis, Estimate, TrialPredictions
from .trial_cost.estimate import UNKNOWN, duration_text

__all__ = ["FRESH", "Walltimes", "left_share"]

#: A trial longer than any job starts on a job with at least this part of the most time left a job was seen with.
FRESH = 0.9


class Walltimes:
    """Each worker's job end (``ends()``, re-read every :data:`~cluster.jobs.POLL_SECONDS` by :meth:`refresh`)
    against each trial's predicted duration (``costs()``: the trial model the executor reads, see the module's
    docstring); ``clock``: epoch seconds, as the job ends are."""

    def __init__(
        self,
        ends: Callable[[], Mapping[str, float]],
        costs: Callable[[], TrialPredictions],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._read_ends, self._costs, self._clock = ends, costs, clock
        self._ends: dict[str, float] = {}
        self._longest = 0.0  # the most time left a job was seen with (at its first sight: a fresh job's walltime)
        self._read = -float("inf")
        # by trial number, with the epoch its run resumes at: until the next refresh, its end, or a run from elsewhere
        self._predicted: dict[int, tuple[int, Estimate]] = {}

    def refresh(self) -> None:
        """Read the job ends again (every :data:`~cluster.jobs.POLL_SECONDS` at most), and predict anew: the model
        has learnt since."""
        if time.monotonic() - self._read >= POLL_SECONDS:
            self._read = time.monotonic()
            ends, now = dict(self._read_ends()), self._clock()
            fresh = [end - now for worker, end in ends.items() if self._ends.get(worker) != end]
            self._longest = max([self._longest, *fresh])
            self._ends = ends
            self._predicted.clear()

    def forget(self, number: int) -> None:
        """Trial ``number`` ended: its next run (a retry, its next segment) is predicted anew."""
        self._predicted.pop(number, None)

    def predicted(self, request: TrialRequest) -> Estimate:
        """The trial's predicted duration: the model's for its parameters, width and epochs (where it knows nothing,
        the median of the recent runs), for the epochs it has left (:func:`left_share`);
        :data:`~cluster.trial_cost.estimate.UNKNOWN` before any run ended."""
        start, known = self._predicted.get(request.number, (-1, UNKNOWN))
        if start != request.start_epoch:
            costs = self._costs()
            known = costs.duration(request.config.params, request.width, request.config.epochs)
            if not known.known:
                median = costs.typical_run()
                known = Estimate(median, median, median, Basis.SAMPLE) if median is not None else UNKNOWN
            known = known.times(left_share(request.start_epoch, request.config.epochs))
            self._predicted[request.number] = (request.start_epoch, known)
        return known

    def time_left(self, worker: str, queue: Sequence[tuple[TrialRequest, float | None]] = ()) -> float | None:
        """Seconds ``worker``'s job has left when a trial queued there behind ``queue`` (its trials, each with when
        it started: None while it waits) would start, each taken to last its predicted duration; None: no job end
        known for it (any trial fits)."""
        end = self._ends.get(worker)
        if end is None:
            return None
        now = self._clock()
        ahead = sum(
            max(0.0, self.predicted(request).mean - (now - started if started is not None else 0.0))
            for request, started in queue
        )
        return end - now - ahead

    def fits(self, request: TrialRequest, left: float | None) -> bool:
        """Whether ``request`` is predicted to end within ``left`` seconds (:meth:`time_left`; None: no end); one
        predicted to outlast every job, whether ``left`` is at least :data:`FRESH` of the most a job had."""
        if left is None:
            return True
        predicted = self.predicted(request)
        return not predicted.known or min(predicted.mean, FRESH * self._longest) < left

    def held_line(self, request: TrialRequest, left: float) -> str:
        """The line that says a trial waits for a job with the time: its predicted duration, and ``left``, the most
        time a worker's job has left when the trial could start there."""
        predicted = self.predicted(request)
        low, high = duration_text(predicted.low), duration_text(predicted.high)
        span = " (the median of the recent runs)" if predicted.basis is Basis.SAMPLE else ""
        span = span or (f" ({low}-{high})" if low != high else "")
        start, epochs = request.start_epoch, request.config.epochs
        span += f" for epochs {start + 1}-{epochs} (it resumes at epoch {start})" if start else ""
        return (
            f"trial {request.number} is predicted to take {duration_text(predicted.mean)}{span} but no worker's batch "
            f"job has more than {duration_text(max(0.0, left))} left when it could start there: it waits for a job "
            "with the time"
        )


def left_share(start_epoch: int, epochs: int, begun: int = 0) -> float:
    """The part of its run a trial's run that resumes at ``start_epoch`` has left, each epoch taken to cost the same:
    ``(epochs - start_epoch) / (epochs - begun)``, where the run predicted whole trains epochs ``begun + 1`` to
    ``epochs`` (its segment's: ``begun`` is the epoch its segment began at; 0: the trial's whole run). 1: it starts
    at ``begun``. The one rule for a resumed run, here (:attr:`TrialRequest.start_epoch`, against the whole run) and in
    the campaign's predictions (``search.loop.costs.TrialCosts.rests``: the time budget's placement, the resource
    budget)."""
    if epochs - begun <= 0:
        return 1.0
    return min(1.0, max(0.0, (epochs - start_epoch) / (epochs - begun)))
