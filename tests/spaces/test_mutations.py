"""Mutations: every mutation of every valid genome is valid; kinds, weights, determinism."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spaces.genomes import (
    ACTIVATIONS,
    CELL_OPS,
    KERNELS,
    LAYER_OPS,
    Block,
    CellGenome,
    CellSpace,
    LayerGenome,
    LayerSpace,
)
from spaces.mutations import (
    CELL_WEIGHTS,
    LAYER_WEIGHTS,
    Mutation,
    apply_mutation,
    mutate,
    mutate_with_kind,
    possible_mutations,
)


@st.composite
def layer_space_and_genome(draw: st.DrawFn) -> tuple[LayerSpace, LayerGenome]:
    min_depth = draw(st.integers(1, 3))
    max_depth = draw(st.integers(min_depth, 6))
    widths = tuple(sorted(draw(st.sets(st.sampled_from((4, 8, 16, 32, 64)), min_size=1))))
    kernels = tuple(sorted(draw(st.sets(st.sampled_from(KERNELS), min_size=1))))
    space = LayerSpace(min_depth, max_depth, widths, kernels)
    depth = draw(st.integers(min_depth, max_depth))
    block = st.builds(
        Block,
        op=st.sampled_from(LAYER_OPS),
        width=st.sampled_from(widths),
        kernel=st.sampled_from(kernels),
        activation=st.sampled_from(ACTIVATIONS),
        skip=st.booleans(),
    )
    return space, LayerGenome(tuple(draw(st.lists(block, min_size=depth, max_size=depth))))


cell_genomes = st.lists(st.sampled_from(CELL_OPS), min_size=6, max_size=6).map(lambda ops: CellGenome(tuple(ops)))
seeds = st.integers(0, 2**32 - 1)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(layer_space_and_genome(), seeds)
def test_every_layer_mutation_is_valid(pair: tuple[LayerSpace, LayerGenome], seed: int) -> None:
    space, genome = pair
    rng = np.random.default_rng(seed)
    for kind in possible_mutations(genome, space):
        child = apply_mutation(kind, genome, space, rng)
        space.validate(child)
        assert (child == genome) == (kind is Mutation.IDENTITY), kind
        assert abs(child.depth - genome.depth) <= 1
    child, kind = mutate_with_kind(genome, space, rng)
    space.validate(child)


_FIELD = {
    Mutation.OP: "op",
    Mutation.WIDTH: "width",
    Mutation.KERNEL: "kernel",
    Mutation.ACTIVATION: "activation",
    Mutation.SKIP: "skip",
}


def _without(blocks: tuple[Block, ...], i: int) -> tuple[Block, ...]:
    return blocks[:i] + blocks[i + 1 :]


def assert_one_block_changed(kind: Mutation, parent: LayerGenome, child: LayerGenome) -> None:
    """A layer mutation touches exactly one block: one field of one block, or one block inserted or removed."""
    if kind in _FIELD:
        assert child.depth == parent.depth, kind
        changed = [i for i, (a, b) in enumerate(zip(parent.blocks, child.blocks)) if a != b]
        assert len(changed) == 1, f"{kind}: blocks {changed} changed ({parent.to_string()} -> {child.to_string()})"
        old, new = parent.blocks[changed[0]], child.blocks[changed[0]]
        fields = [f for f in ("op", "width", "kernel", "activation", "skip") if getattr(old, f) != getattr(new, f)]
        assert fields == [_FIELD[kind]], f"{kind} changed {fields}"
    elif kind is Mutation.INSERT:
        assert child.depth == parent.depth + 1
        assert any(_without(child.blocks, i) == parent.blocks for i in range(child.depth)), kind
    elif kind is Mutation.REMOVE:
        assert child.depth == parent.depth - 1
        assert any(_without(parent.blocks, i) == child.blocks for i in range(parent.depth)), kind
    else:
        assert kind is Mutation.IDENTITY and child == parent


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(layer_space_and_genome(), seeds)
def test_each_layer_mutation_changes_exactly_one_block(pair: tuple[LayerSpace, LayerGenome], seed: int) -> None:
    space, genome = pair
    rng = np.random.default_rng(seed)
    for kind in possible_mutations(genome, space):
        assert_one_block_changed(kind, genome, apply_mutation(kind, genome, space, rng))
    child, kind = mutate_with_kind(genome, space, rng)
    assert_one_block_changed(kind, genome, child)


def test_a_field_mutation_leaves_every_other_block_alone() -> None:
    """Deterministic companion of the property test: every block position, neighbours that differ from it."""
    space = LayerSpace(min_depth=1, max_depth=6, widths=(8, 16, 32), kernels=(3, 5))
    blocks = (
        Block("conv", 8, 3, "relu", False),
        Block("pool", 16, 5, "gelu", True),
        Block("identity", 32, 3, "tanh", False),
        Block("conv", 16, 5, "relu", True),
    )
    genome = LayerGenome(blocks)
    for seed in range(200):
        rng = np.random.default_rng(seed)
        for kind in possible_mutations(genome, space):
            assert_one_block_changed(kind, genome, apply_mutation(kind, genome, space, rng))


@settings(max_examples=200, deadline=None)
@given(cell_genomes, seeds)
def test_every_cell_mutation_is_valid(genome: CellGenome, seed: int) -> None:
    space = CellSpace()
    rng = np.random.default_rng(seed)
    for kind in possible_mutations(genome, space):
        child = apply_mutation(kind, genome, space, rng)
        space.validate(child)
        changed = sum(a != b for a, b in zip(child.edges, genome.edges))
        expected = {Mutation.IDENTITY: 0, Mutation.EDGE_OP: 1, Mutation.REWIRE: 2}[kind]
        assert changed == expected
        if kind is Mutation.REWIRE:
            assert sorted(child.edges) == sorted(genome.edges)


@settings(max_examples=50, deadline=None)
@given(seeds)
def test_mutations_respect_max_params(seed: int) -> None:
    space = LayerSpace(widths=(8, 16, 32, 64), max_params=3_000)
    rng = np.random.default_rng(seed)
    genome = space.sample(rng)
    for _ in range(30):
        genome = mutate(genome, space, rng)
        assert space.count_params(genome) <= 3_000


def test_impossible_kinds_are_left_out() -> None:
    space = LayerSpace(min_depth=1, max_depth=1, widths=(16,), kernels=(3,))
    genome = LayerGenome((Block("conv", 16, 3, "relu", False),))
    kinds = possible_mutations(genome, space)
    assert Mutation.INSERT not in kinds and Mutation.REMOVE not in kinds
    assert Mutation.WIDTH not in kinds and Mutation.KERNEL not in kinds
    rng = np.random.default_rng(0)
    for _ in range(100):
        child, kind = mutate_with_kind(genome, space, rng)
        space.validate(child)
        assert kind in kinds
    with pytest.raises(ValueError, match="'remove' cannot apply"):
        apply_mutation(Mutation.REMOVE, genome, space, rng)
    uniform = CellGenome(("none",) * 6)
    assert Mutation.REWIRE not in possible_mutations(uniform, CellSpace())


def test_kinds_follow_documented_weights() -> None:
    assert sum(LAYER_WEIGHTS.values()) == pytest.approx(1.0)
    assert sum(CELL_WEIGHTS.values()) == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    space = LayerSpace()
    genome = LayerGenome((Block("conv", 16, 3, "relu", False),) * 3)  # every kind possible
    counts = collections.Counter(mutate_with_kind(genome, space, rng)[1] for _ in range(4000))
    for kind, weight in LAYER_WEIGHTS.items():
        assert counts[kind] / 4000 == pytest.approx(weight, abs=0.03), kind


def test_mutate_is_deterministic_and_pure() -> None:
    space = CellSpace()
    genome = CellGenome.from_string(
        "|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|"
    )
    a = [mutate(genome, space, np.random.default_rng(3)) for _ in range(2)]
    assert a[0] == a[1]
    assert genome.edges[0] == "nor_conv_3x3"  # the parent is untouched (frozen)


def test_mismatched_space_raises() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="not a LayerGenome"):
        mutate(CellGenome(("none",) * 6), LayerSpace(), rng)  # type: ignore[type-var]
    with pytest.raises(ValueError, match="not a CellGenome"):
        mutate(LayerGenome((Block("conv", 16, 3, "relu", False),)), CellSpace(), rng)
    with pytest.raises(ValueError, match="width 7 is not allowed"):
        mutate(LayerGenome((Block("conv", 7, 3, "relu", False),)), LayerSpace(), rng)
