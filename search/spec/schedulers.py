"""The scheduling policies a spec may name (``[study] scheduler``): the registry of that extension point.

Each entry's value is the spec section the policy reads ("" for none); the campaign's policies
(``search.loop.policies.policies_for``) add the named one to the built-in ones (retries, a full disk,
pruning), which every campaign has.
"""

from __future__ import annotations

from search.vocab.registry import Registry

__all__ = ["POLICY_REGISTRY", "SCHEDULERS"]

POLICY_REGISTRY: Registry[str] = Registry("scheduler")
POLICY_REGISTRY.add("none", "", "no scheduling policy: every trial trains its epochs once (pruning may stop it)")
POLICY_REGISTRY.add("pbt", "pbt", "population-based training: members exploit and explore every [pbt] interval")
SCHEDULERS = POLICY_REGISTRY.names()
