"""Why a lost trial was lost, told from what the controller saw of it: its batch job's walltime, or memory.

A worker killed for memory takes every trial running on it; the one blamed is the one whose memory filled it
(:meth:`Forensics.culprit`), and only that one ends out of memory (the others were lost with their worker, and are
retried as such). The sure sign is the nanny's kill event (:mod:`cluster.memory_kills`); the kernel's OOM killer
leaves only the trial's last memory figure (:func:`host_out_of_memory`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from .jobs import job_expired
from .memory_kills import MemoryKill, MemoryKills
from .outcome import Outcome, TrialStatus

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["Forensics", "host_out_of_memory", "CLOCK_SLACK", "CULPRIT_MARGIN", "HOST_OOM_NEAR", "MEMORY_WORDS"]

CLOCK_SLACK = 2.0  # seconds a worker's clock may run ahead of the scheduler's (a kill is matched to a trial's start)
CULPRIT_MARGIN = 1.5  # of trials on a worker killed for memory, the one whose memory is 1.5 x the next one's filled it
HOST_OOM_NEAR = 0.6  # a worker killed with at least this fraction of its memory limit in use ran out of memory
MEMORY_WORDS = ("memory budget", "out of memory", "oom-kill", "oom kill", "memoryerror")  # a lost worker's error: why


def host_out_of_memory(error: str, memory: int, limit: int) -> bool:
    """Whether a lost worker ran out of host memory, judged without its nanny's kill event
    (:mod:`cluster.memory_kills`, the sure sign): its error says so, or the trial's last memory figure was within
    :data:`HOST_OOM_NEAR` of the worker's limit (the kernel's OOM killer, which ends a worker with SIGKILL before
    its nanny sees it at 95%, leaves only that figure behind)."""
    if any(word in error.lower() for word in MEMORY_WORDS):
        return True
    return limit > 0 and memory >= HOST_OOM_NEAR * limit


class Forensics:
    """What running trials left behind (their worker and start, their last memory figure), and the diagnosis of the
    lost ones when they end. ``memory_limits()``: each worker's memory limit (bytes), as last seen."""

    def __init__(self, client: Client, memory_limits: Callable[[], Mapping[str, int]]) -> None:
        self._client = client
        self._limits = memory_limits
        self._kills = MemoryKills(client)
        self._seen: dict[int, int] = {}  # running trials' last memory figure (bytes)
        self._started_on: dict[int, tuple[str, float]] = {}  # running trials' worker and start (worker's clock)
        self._blamed: dict[MemoryKill, int | None] = {}  # each memory kill: the trial that filled the worker

    def memory(self, number: int, peak: int) -> None:
        """Trial ``number``'s memory peak so far (bytes)."""
        self._seen[number] = peak

    def started(self, number: int, worker: str, at: float) -> None:
        """Trial ``number`` began on ``worker`` at ``at`` (the worker's clock)."""
        self._started_on[number] = (worker, at)

    def diagnose(self, number: int, outcome: Outcome) -> Outcome | None:
        """A lost trial's outcome with why it was lost, where that can be told: its batch job reached its walltime,
        or its worker's nanny killed it for memory (or, failing that event, it was killed with the trial's memory
        near its limit); None when there is nothing to add. Forgets the trial either way."""
        seen = self._seen.pop(number, 0)
        worker, since = self._started_on.pop(number, (outcome.worker, outcome.started or 0.0))
        if outcome.status != TrialStatus.LOST:
            return None
        if job_expired(self._client, worker or outcome.worker):
            return dataclasses.replace(
                outcome, job_expired=True, error=f"its batch job reached its walltime ({outcome.error})"
            )
        oom, resident = self._host_oom(number, outcome, worker or outcome.worker, since, seen)
        if not oom:
            return None
        return dataclasses.replace(
            outcome,
            oom=True,
            error=f"out of memory: {oom} ({outcome.error})",
            worker=outcome.worker or worker,
            peak_memory=max(outcome.peak_memory, seen, resident),
            memory_kind=outcome.memory_kind or "rss",
        )

    def _host_oom(self, number: int, outcome: Outcome, worker: str, since: float, seen: int) -> tuple[str, int]:
        """Why the lost trial ran out of host memory ('' when it did not, as far as the controller can tell), and
        its worker's resident memory when its nanny killed it (bytes, 0 when unknown)."""
        kill = self._kills.lookup(worker, since - CLOCK_SLACK) if worker else None
        if kill is not None:
            if self.culprit(kill, number, seen) != number:
                return "", 0  # it only shared the worker with the trial that filled it: a lost worker, retried
            return f"its worker {worker} was killed by its nanny at {kill.rss / 2**20:.0f} MiB resident", kill.rss
        limits = self._limits()
        limit = limits.get(worker, 0) or max(limits.values(), default=0)
        if host_out_of_memory(outcome.error, seen, limit):  # the kernel's OOM killer leaves no event: the figures
            why = f"its worker was killed with {seen / 2**20:.0f} MiB in use of a {limit / 2**20:.0f} MiB limit"
            return why, 0
        return "", 0

    def culprit(self, kill: MemoryKill, number: int, seen: int) -> int | None:
        """The trial a memory kill is blamed on: the one trial running on that worker then, or, of several, the one
        whose last memory figure stands out (by :data:`CULPRIT_MARGIN`); None when the figures cannot tell
        (trials in the worker's own thread all measure its one process). Decided once per kill."""
        if kill not in self._blamed:
            figures = {
                n: self._seen.get(n, 0)
                for n, (w, t) in self._started_on.items()
                if w == kill.worker and t <= kill.time + CLOCK_SLACK
            }
            figures[number] = seen
            ranked = sorted(figures.items(), key=lambda item: -item[1])
            alone = len(ranked) == 1 or ranked[0][1] > CULPRIT_MARGIN * ranked[1][1]
            self._blamed[kill] = ranked[0][0] if alone else None
        return self._blamed[kill]

    def close(self) -> None:
        self._kills.close()
