"""Out of memory is information about a configuration, not a failure and not a lost worker.

A trial whose outcome says it ran out of memory (a CUDA ``OutOfMemoryError`` in the trainer, or
its worker killed with its memory near the limit: ``Outcome.oom``) is told PRUNED with the reason
:data:`OUT_OF_MEMORY`, never retried, and, where the sampler reads constraints (TPE, GP, NSGA-II,
a sampler class), it carries the constraint :data:`OOM_CONSTRAINT` = 1: Optuna counts it
infeasible, so the sampler steers away from configurations like it. The policy comes before
the retry of lost trials (:mod:`search.loop.policies`).
"""

from __future__ import annotations

from cluster.executor import Outcome
from search.store.records import Attr

__all__ = ["OUT_OF_MEMORY", "OOM_CONSTRAINT", "device_fields"]

OUT_OF_MEMORY = "out of memory"  # the stop reason (the existing string form; the lead may make it an enum)
OOM_CONSTRAINT = "out_of_memory"  # the constraint an out-of-memory trial carries (> 0: infeasible)


def device_fields(outcome: Outcome) -> dict[str, object]:
    """The outcome's device figures as trial attributes (only those it measured)."""
    fields: dict[str, object] = {}
    if outcome.share:
        fields[Attr.GPU_SHARE] = outcome.share
    if outcome.peak_memory:
        fields.update(
            {
                Attr.PEAK_MEMORY: outcome.peak_memory,
                Attr.MEMORY_KIND: outcome.memory_kind,
                Attr.MEMORY_SHARED: outcome.memory_shared,
            }
        )
    if outcome.gpu_utilization is not None:
        fields[Attr.GPU_UTILIZATION] = outcome.gpu_utilization
    return fields
