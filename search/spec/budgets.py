"""``[study] slot_hours`` / ``gpu_hours``: a budget in resources (:mod:`search.loop.resource_budget` spends it)."""

from __future__ import annotations

from search.spec.table import SpecTable

__all__ = ["BUDGET_KEYS", "budget_fields"]

BUDGET_KEYS = ("slot_hours", "gpu_hours")


def budget_fields(t: SpecTable) -> dict[str, float]:
    """The ``StudySpec`` fields these keys give, validated (one-line ``SpecError`` naming the value and rule)."""
    for key in BUDGET_KEYS:
        if t.data.get("deterministic") and t.data.get(key):
            raise t.error(
                key, "a deterministic campaign cannot have a resource budget: what it spends depends on timing"
            )
    if t.data.get("slot_hours") and t.data.get("gpu_hours"):
        raise t.error("gpu_hours", "give a budget in slot_hours or in gpu_hours, not both")
    return {key: t.float(key, 0.0, minimum=0.0) for key in BUDGET_KEYS}
