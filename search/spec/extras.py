"""The optional extras a spec needs (``[cluster] backend``, ``[logging]``, the trainer, the dataset), checked before
anything starts: ``check``, ``run`` and ``resume`` name a missing one with its install command in one line, where
the campaign would otherwise fail at its first trial, or fail every trial."""

from __future__ import annotations

import sys
import types

from search.compat.versions import install_command, missing_modules
from search.spec.campaign_spec import CampaignSpec
from search.spec.table import SpecError

__all__ = ["needed_extras", "check_extras"]

# A trainer that imports an integration without its framework fails at its import, which names the extra
# (search.spec.trainer_check); the Hugging Face Trainer also needs accelerate, which it imports only when it trains.
_INTEGRATIONS = {"trainers.integrations.huggingface": "huggingface"}


def needed_extras(spec: CampaignSpec) -> list[tuple[str, str]]:
    """(extra, the spec key that needs it), in the spec's order."""
    needed = []
    if spec.cluster.backend in ("slurm", "pbs", "kubernetes"):
        needed.append((spec.cluster.backend, "cluster.backend"))
    if spec.logging.mlflow:
        needed.append(("mlflow", "logging.mlflow"))
    if spec.logging.wandb:
        needed.append(("wandb", "logging.wandb"))
    for extra in _integrations_used(spec.trainer.entry.partition(":")[0]):
        needed.append((extra, "trainer.entry"))
    if spec.trainer.dataset == "mnist1d":
        needed.append(("mnist1d", "trainer.dataset"))
    return needed


def _integrations_used(module: str) -> list[str]:
    """The extras of the ``trainers.integrations`` modules the trainer's module is, or took names from (once it is
    imported, as checking a spec against its trainer does; they import their framework only when used)."""
    loaded = sys.modules.get(module)
    values = list(vars(loaded).values()) if loaded is not None else []
    names = {module, *(getattr(v, "__module__", None) or "" for v in values)}
    names |= {v.__name__ for v in values if isinstance(v, types.ModuleType)}
    return [
        extra
        for prefix, extra in _INTEGRATIONS.items()
        if any(n == prefix or n.startswith(prefix + ".") for n in names)
    ]


def check_extras(spec: CampaignSpec) -> None:
    """Raise :class:`SpecError` for the first extra the spec needs whose modules cannot be imported here."""
    for extra, key in needed_extras(spec):
        missing = missing_modules(extra)
        if missing:
            raise SpecError(
                spec.source,
                key,
                f"needs the [{extra}] extra ({', '.join(missing)} not installed): {install_command(extra)}",
            )
