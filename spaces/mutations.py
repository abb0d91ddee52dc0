"""Pure mutations of architecture genomes: ``mutate(genome, space, rng) -> genome``.

The kind of mutation is drawn from ``rng`` with fixed weights among the kinds that are
possible for this genome under this space (a kind that cannot apply -- removing a block
at ``min_depth``, changing the width when only one width is allowed, ... -- is left out
and the remaining weights renormalised). Every kind but :attr:`Mutation.IDENTITY`
returns a different genome. The result always satisfies ``space.validate``; under a
``max_params`` budget an over-budget child is redrawn, and after
:data:`MAX_ATTEMPTS` failures the parent itself is returned (an identity mutation).

Weights (Real et al. 2019 keep an identity mutation too):

========================  ======  ====================================================
layer kind                weight  effect
========================  ======  ====================================================
``OP``                    0.25    one block's op -> another op
``WIDTH``                 0.15    one block's width -> another allowed width
``KERNEL``                0.10    one block's kernel -> another allowed kernel
``ACTIVATION``            0.05    one block's activation -> another
``INSERT``                0.15    a random block inserted at a random position
``REMOVE``                0.15    one block removed
``SKIP``                  0.10    one block's skip toggled
``IDENTITY``              0.05    unchanged
========================  ======  ====================================================

========================  ======  ====================================================
cell kind                 weight  effect
========================  ======  ====================================================
``EDGE_OP``               0.80    one edge's op -> another op
``REWIRE``                0.15    two inputs of one node swap ops (a different wiring)
``IDENTITY``              0.05    unchanged
========================  ======  ====================================================
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np

from spaces.genomes import (
    ACTIVATIONS,
    CELL_EDGES,
    CELL_OPS,
    LAYER_OPS,
    CellGenome,
    CellSpace,
    Genome,
    GenomeSpace,
    LayerGenome,
    LayerSpace,
)

__all__ = [
    "CELL_WEIGHTS",
    "LAYER_WEIGHTS",
    "MAX_ATTEMPTS",
    "Mutation",
    "apply_mutation",
    "mutate",
    "mutate_with_kind",
    "possible_mutations",
]

MAX_ATTEMPTS = 20

G = TypeVar("G", LayerGenome, CellGenome)


class Mutation(enum.Enum):
    """A kind of mutation."""

    IDENTITY = "identity"
    OP = "op"
    WIDTH = "width"
    KERNEL = "kernel"
    ACTIVATION = "activation"
    INSERT = "insert"
    REMOVE = "remove"
    SKIP = "skip"
    EDGE_OP = "edge_op"
    REWIRE = "rewire"


LAYER_WEIGHTS: Mapping[Mutation, float] = {
    Mutation.OP: 0.25,
    Mutation.WIDTH: 0.15,
    Mutation.KERNEL: 0.10,
    Mutation.ACTIVATION: 0.05,
    Mutation.INSERT: 0.15,
    Mutation.REMOVE: 0.15,
    Mutation.SKIP: 0.10,
    Mutation.IDENTITY: 0.05,
}

CELL_WEIGHTS: Mapping[Mutation, float] = {
    Mutation.EDGE_OP: 0.80,
    Mutation.REWIRE: 0.15,
    Mutation.IDENTITY: 0.05,
}


def mutate(genome: G, space: GenomeSpace, rng: np.random.Generator) -> G:
    """A mutated copy of ``genome``, valid under ``space``; see the module docstring."""
    return mutate_with_kind(genome, space, rng)[0]


def mutate_with_kind(genome: G, space: GenomeSpace, rng: np.random.Generator) -> tuple[G, Mutation]:
    """Like :func:`mutate`, also returning the kind that was applied."""
    space.validate(genome)  # type: ignore[arg-type]
    weights = _weights(space)
    kinds = possible_mutations(genome, space)
    p = np.array([weights[k] for k in kinds], dtype=float)
    p /= p.sum()
    for _ in range(MAX_ATTEMPTS):
        kind = kinds[int(rng.choice(len(kinds), p=p))]
        child = _APPLY[kind](genome, space, rng)
        if space.is_valid(child):
            return child, kind
    return genome, Mutation.IDENTITY


def apply_mutation(kind: Mutation, genome: G, space: GenomeSpace, rng: np.random.Generator) -> G:
    """Apply one given ``kind`` (it must be in :func:`possible_mutations`); the result
    obeys the space's structure but, under ``max_params``, may exceed the budget."""
    if kind not in possible_mutations(genome, space):
        raise ValueError(f"mutation {kind.value!r} cannot apply to {genome.to_string()!r}")
    return _APPLY[kind](genome, space, rng)


def possible_mutations(genome: Genome, space: GenomeSpace) -> list[Mutation]:
    """The kinds that can change ``genome`` under ``space`` (always with IDENTITY)."""
    if isinstance(space, CellSpace):
        if not isinstance(genome, CellGenome):
            raise ValueError(f"{genome!r} is not a CellGenome (space is a CellSpace)")
        kinds = [Mutation.EDGE_OP, Mutation.IDENTITY]
        if _rewirable_nodes(genome):
            kinds.insert(1, Mutation.REWIRE)
        return kinds
    if not isinstance(space, LayerSpace):
        raise ValueError(f"space {space!r} is neither a LayerSpace nor a CellSpace")
    if not isinstance(genome, LayerGenome):
        raise ValueError(f"{genome!r} is not a LayerGenome (space is a LayerSpace)")
    kinds = [Mutation.OP, Mutation.ACTIVATION, Mutation.SKIP, Mutation.IDENTITY]
    if len(space.widths) > 1:
        kinds.append(Mutation.WIDTH)
    if len(space.kernels) > 1:
        kinds.append(Mutation.KERNEL)
    if genome.depth < space.max_depth:
        kinds.append(Mutation.INSERT)
    if genome.depth > space.min_depth:
        kinds.append(Mutation.REMOVE)
    return [k for k in LAYER_WEIGHTS if k in kinds]  # fixed order, for determinism


def _weights(space: GenomeSpace) -> Mapping[Mutation, float]:
    return CELL_WEIGHTS if isinstance(space, CellSpace) else LAYER_WEIGHTS


def _other(choices: tuple[Any, ...], current: object, rng: np.random.Generator) -> Any:
    """A uniformly chosen element of ``choices`` different from ``current``."""
    others = [c for c in choices if c != current]
    return others[int(rng.integers(len(others)))]


# --------------------------------------------------------------------------- layers


def _replace_block(
    genome: LayerGenome, rng: np.random.Generator, field: str, choices: tuple[object, ...]
) -> LayerGenome:
    i = int(rng.integers(genome.depth))
    old = genome.blocks[i]
    new = dataclasses.replace(old, **{field: _other(choices, getattr(old, field), rng)})
    return LayerGenome(genome.blocks[:i] + (new,) + genome.blocks[i + 1 :])


def _layer_op(g: LayerGenome, s: LayerSpace, rng: np.random.Generator) -> LayerGenome:
    return _replace_block(g, rng, "op", LAYER_OPS)


def _layer_width(g: LayerGenome, s: LayerSpace, rng: np.random.Generator) -> LayerGenome:
    return _replace_block(g, rng, "width", s.widths)


def _layer_kernel(g: LayerGenome, s: LayerSpace, rng: np.random.Generator) -> LayerGenome:
    return _replace_block(g, rng, "kernel", s.kernels)


def _layer_activation(g: LayerGenome, s: LayerSpace, rng: np.random.Generator) -> LayerGenome:
    return _replace_block(g, rng, "activation", ACTIVATIONS)


def _layer_skip(g: LayerGenome, s: LayerSpace, rng: np.random.Generator) -> LayerGenome:
    return _replace_block(g, rng, "skip", (False, True))


def _layer_insert(g: LayerGenome, s: LayerSpace, rng: np.random.Generator) -> LayerGenome:
    i = int(rng.integers(g.depth + 1))
    return LayerGenome(g.blocks[:i] + (s.sample_block(rng),) + g.blocks[i:])


def _layer_remove(g: LayerGenome, s: LayerSpace, rng: np.random.Generator) -> LayerGenome:
    i = int(rng.integers(g.depth))
    return LayerGenome(g.blocks[:i] + g.blocks[i + 1 :])


# --------------------------------------------------------------------------- cells


def _rewirable_nodes(genome: CellGenome) -> list[int]:
    """Nodes with at least two incoming edges carrying different ops."""
    return [node for node in (2, 3) if len({op for (dst, _), op in zip(CELL_EDGES, genome.edges) if dst == node}) > 1]


def _cell_edge_op(g: CellGenome, s: CellSpace, rng: np.random.Generator) -> CellGenome:
    i = int(rng.integers(len(CELL_EDGES)))
    edges = list(g.edges)
    edges[i] = _other(CELL_OPS, edges[i], rng)
    return CellGenome(tuple(edges))


def _cell_rewire(g: CellGenome, s: CellSpace, rng: np.random.Generator) -> CellGenome:
    nodes = _rewirable_nodes(g)
    node = nodes[int(rng.integers(len(nodes)))]
    incoming = [i for i, (dst, _) in enumerate(CELL_EDGES) if dst == node]
    pairs = [(a, b) for a in incoming for b in incoming if a < b and g.edges[a] != g.edges[b]]
    a, b = pairs[int(rng.integers(len(pairs)))]
    edges = list(g.edges)
    edges[a], edges[b] = edges[b], edges[a]
    return CellGenome(tuple(edges))


def _identity(g: G, s: GenomeSpace, rng: np.random.Generator) -> G:
    return g


_APPLY: Mapping[Mutation, Callable] = {
    Mutation.IDENTITY: _identity,
    Mutation.OP: _layer_op,
    Mutation.WIDTH: _layer_width,
    Mutation.KERNEL: _layer_kernel,
    Mutation.ACTIVATION: _layer_activation,
    Mutation.INSERT: _layer_insert,
    Mutation.REMOVE: _layer_remove,
    Mutation.SKIP: _layer_skip,
    Mutation.EDGE_OP: _cell_edge_op,
    Mutation.REWIRE: _cell_rewire,
}
