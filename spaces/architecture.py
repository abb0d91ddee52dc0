"""Architecture genomes as search-space parameters: ``arch = { type = "cell" }`` or ``type = "layers"``.

A genome is searched through flat Optuna parameters (``arch.e0`` ... or
``arch.depth``, ``arch.b0.op`` ...), so every Optuna sampler, the dashboard and
the plots work with it; the trainer receives the genome's canonical string
under the parameter's own name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from optuna.distributions import BaseDistribution

from spaces.errors import SpaceError
from spaces.genomes import CellGenome, CellSpace, LayerGenome, LayerSpace, parse_genome_space
from spaces.params import Param, register_param_type

__all__ = ["GenomeParam", "genome_from_string"]


def genome_from_string(text: str) -> LayerGenome | CellGenome:
    """Parse either genome's canonical string (cells start with '|')."""
    return CellGenome.from_string(text) if text.startswith("|") else LayerGenome.from_string(text)


@dataclass(frozen=True)
class GenomeParam(Param):
    """An architecture searched through its flat parameters ``<name>.*``."""

    name: str
    space: LayerSpace | CellSpace

    def distribution(self) -> None:
        return None  # several flat distributions, see distributions()

    def distributions(self) -> dict[str, BaseDistribution]:
        return dict(self.space.distributions(self.name))

    def to_builtin(self, value: Any) -> str:
        return value.to_string() if hasattr(value, "to_string") else str(value)

    def decode(self, sampled: Mapping[str, Any]) -> LayerGenome | CellGenome:
        try:
            genome = self.space.decode(sampled, self.name)
            self.space.validate(cast(Any, genome))  # decode gives a genome of its own space
        except SpaceError:
            raise
        except (KeyError, ValueError) as exc:
            raise SpaceError(self.name, f"invalid genome: {exc}") from None
        return genome

    def value_from(self, sampled: Mapping[str, Any]) -> str:
        return self.decode(sampled).to_string()


def _build(name: str, table: Mapping[str, Any]) -> GenomeParam:
    try:
        return GenomeParam(name, parse_genome_space(name, table))
    except ValueError as exc:
        text = str(exc)
        key, _, problem = text.partition(": ")
        raise SpaceError(key if key.startswith(name) else name, problem or text) from None


register_param_type("layers", _build)
register_param_type("cell", _build)
