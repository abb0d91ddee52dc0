"""Layer and cell genomes: validation, canonical strings, flat Optuna params, sampling."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from optuna.distributions import CategoricalDistribution, IntDistribution

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
    parse_genome_space,
)

NB201_EXAMPLE = "|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|"


@st.composite
def layer_spaces(draw: st.DrawFn) -> LayerSpace:
    min_depth = draw(st.integers(1, 3))
    max_depth = draw(st.integers(min_depth, 6))
    widths = tuple(draw(st.sets(st.sampled_from((4, 8, 16, 32, 64)), min_size=1)))
    kernels = tuple(draw(st.sets(st.sampled_from(KERNELS), min_size=1)))
    return LayerSpace(min_depth, max_depth, tuple(sorted(widths)), tuple(sorted(kernels)))


@st.composite
def layer_genomes(draw: st.DrawFn, space: LayerSpace) -> LayerGenome:
    depth = draw(st.integers(space.min_depth, space.max_depth))
    block = st.builds(
        Block,
        op=st.sampled_from(LAYER_OPS),
        width=st.sampled_from(space.widths),
        kernel=st.sampled_from(space.kernels),
        activation=st.sampled_from(ACTIVATIONS),
        skip=st.booleans(),
    )
    return LayerGenome(tuple(draw(st.lists(block, min_size=depth, max_size=depth))))


cell_genomes = st.lists(st.sampled_from(CELL_OPS), min_size=6, max_size=6).map(lambda ops: CellGenome(tuple(ops)))


@st.composite
def space_and_layer_genome(draw: st.DrawFn) -> tuple[LayerSpace, LayerGenome]:
    space = draw(layer_spaces())
    return space, draw(layer_genomes(space))


# --------------------------------------------------------------------------- round trips


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(space_and_layer_genome(), st.sampled_from(["arch", "net.body"]))
def test_layer_round_trips(pair: tuple[LayerSpace, LayerGenome], prefix: str) -> None:
    space, genome = pair
    space.validate(genome)
    assert LayerGenome.from_string(genome.to_string()) == genome
    params = space.encode(genome, prefix)
    assert set(params) == set(space.distributions(prefix))
    for name, value in params.items():
        assert type(value) in (int, str, bool), name
        dist = space.distributions(prefix)[name]
        assert dist._contains(dist.to_internal_repr(value))
    assert space.decode(params, prefix) == genome


@settings(max_examples=150, deadline=None)
@given(cell_genomes)
def test_cell_round_trips(genome: CellGenome) -> None:
    space = CellSpace()
    assert CellGenome.from_string(genome.to_string()) == genome
    params = space.encode(genome, "arch")
    assert sorted(params) == [f"arch.e{i}" for i in range(6)]
    assert space.decode(params, "arch") == genome


def test_cell_string_is_nas_bench_201_format() -> None:
    genome = CellGenome.from_string(NB201_EXAMPLE)
    assert genome.edges == (
        "nor_conv_3x3",
        "nor_conv_3x3",
        "avg_pool_3x3",
        "skip_connect",
        "nor_conv_3x3",
        "skip_connect",
    )
    assert genome.to_string() == NB201_EXAMPLE


def test_layer_string_format() -> None:
    genome = LayerGenome((Block("conv", 32, 3, "relu", True), Block("pool", 8, 1, "tanh", False)))
    assert genome.to_string() == "conv:w32:k3:relu:skip|pool:w8:k1:tanh:noskip"


def test_decode_ignores_blocks_beyond_depth() -> None:
    space = LayerSpace(max_depth=3)
    genome = LayerGenome((Block("sepconv", 16, 5, "gelu", True),))
    params = space.encode(genome, "a")
    params["a.b2.op"] = "pool"
    assert space.decode(params, "a") == genome
    del params["a.b1.op"], params["a.b2.op"]  # a trial that only suggested depth blocks
    assert space.decode(params, "a") == genome


# --------------------------------------------------------------------------- spaces


def test_cell_space_has_15625_cells() -> None:
    space = CellSpace()
    cells = list(space.all_genomes())
    assert space.size == len(cells) == len(set(cells)) == 15_625
    assert [space.index(c) for c in cells[:3]] == [0, 1, 2]
    assert space.index(cells[-1]) == 15_624


def test_distributions_names() -> None:
    layer = LayerSpace(max_depth=2, widths=(16, 32))
    dists = layer.distributions("arch")
    assert dists["arch.depth"] == IntDistribution(1, 2)
    assert dists["arch.b1.width"] == CategoricalDistribution((16, 32))
    assert dists["arch.b0.skip"] == CategoricalDistribution((False, True))
    assert len(dists) == 1 + 2 * 5
    cell = CellSpace().distributions("c")
    assert list(cell) == [f"c.e{i}" for i in range(6)]
    assert all(d == CategoricalDistribution(CELL_OPS) for d in cell.values())


def test_sample_is_valid_and_seeded() -> None:
    for space in (LayerSpace(), LayerSpace(2, 4, (16,), (3,)), CellSpace()):
        a = [space.sample(np.random.default_rng(7)) for _ in range(2)]
        assert a[0] == a[1]
        rng = np.random.default_rng(0)
        for _ in range(200):
            space.validate(space.sample(rng))  # type: ignore[arg-type]


def test_cell_sample_is_uniform_over_edges() -> None:
    rng = np.random.default_rng(0)
    counts = np.zeros((6, 5))
    for _ in range(2000):
        for i, op in enumerate(CellSpace().sample(rng).edges):
            counts[i, CELL_OPS.index(op)] += 1
    assert counts.min() > 300 and counts.max() < 500


def test_max_params_is_respected() -> None:
    space = LayerSpace(widths=(8, 16, 32, 64), max_params=2_000)
    rng = np.random.default_rng(1)
    for _ in range(200):
        assert space.count_params(space.sample(rng)) <= 2_000
    big = LayerGenome((Block("conv", 64, 5, "relu", False),) * 2)
    with pytest.raises(ValueError, match="max_params"):
        space.validate(big)


def test_count_params_by_hand() -> None:
    space = LayerSpace(in_channels=1)
    g = LayerGenome(
        (
            Block("conv", 8, 3, "relu", False),  # 1*8*9 + 8 = 80
            Block("sepconv", 16, 3, "relu", True),  # 8*9 + 8*16 + 16 + skip 8*16 = 344
            Block("pool", 16, 3, "relu", False),  # 0
            Block("identity", 8, 1, "relu", True),  # 16*8 + skip 16*8 = 256
        )
    )
    assert space.count_params(g) == 80 + 344 + 0 + 256


# --------------------------------------------------------------------------- invalid input


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda: Block("dense", 8, 3, "relu", False), "op 'dense' is unknown"),
        (lambda: Block("conv", 0, 3, "relu", False), "width 0"),
        (lambda: Block("conv", 8, 2, "relu", False), "kernel 2"),
        (lambda: Block("conv", 8, 3, "swish", False), "activation 'swish'"),
        (lambda: Block("conv", 8, 3, "relu", 1), "skip 1"),
        (lambda: LayerGenome(()), "depth 0"),
        (lambda: CellGenome(("none",) * 5), "5 edges"),
        (lambda: CellGenome(("none",) * 5 + ("conv",)), "edge 5 op 'conv'"),
        (lambda: LayerSpace(min_depth=0), "min_depth 0"),
        (lambda: LayerSpace(min_depth=3, max_depth=2), "max_depth 2"),
        (lambda: LayerSpace(widths=()), "widths"),
        (lambda: LayerSpace(kernels=(7,)), "kernels"),
        (lambda: LayerSpace(max_params=3), "max_params 3"),
    ],
)
def test_invalid_values_raise_with_reason(make, reason: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=reason):
        make()


def test_validate_against_space_limits() -> None:
    space = LayerSpace(min_depth=2, max_depth=3, widths=(16, 32), kernels=(3,))
    ok = Block("conv", 16, 3, "relu", False)
    with pytest.raises(ValueError, match=r"depth 1 is out of range \[2, 3\]"):
        space.validate(LayerGenome((ok,)))
    with pytest.raises(ValueError, match=r"depth 4 is out of range"):
        space.validate(LayerGenome((ok,) * 4))
    with pytest.raises(ValueError, match="block 1: width 8 is not allowed"):
        space.validate(LayerGenome((ok, Block("conv", 8, 3, "relu", False))))
    with pytest.raises(ValueError, match="block 0: kernel 5 is not allowed"):
        space.validate(LayerGenome((Block("conv", 16, 5, "relu", False), ok)))
    with pytest.raises(ValueError, match="not a LayerGenome"):
        space.validate(CellGenome(("none",) * 6))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("|none~0|+|none~0|none~1|", "3 nodes"),
        ("|none~0|+|none~0|+|none~0|none~1|none~2|", "node 2 has 1 inputs"),
        ("|none~1|+|none~0|none~1|+|none~0|none~1|none~2|", "'none~1' must be '<op>~0'"),
        ("|conv~0|+|none~0|none~1|+|none~0|none~1|none~2|", "op 'conv' is unknown"),
        ("none~0+|none~0|none~1|+|none~0|none~1|none~2|", "wrapped"),
    ],
)
def test_bad_cell_strings(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        CellGenome.from_string(text)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("conv:w8:k3:relu", "form"),
        ("conv:wx:k3:relu:skip", "integers"),
        ("conv:w8:k3:relu:skip|", "form"),
    ],
)
def test_bad_layer_strings(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        LayerGenome.from_string(text)


def test_decode_missing_or_bad_params() -> None:
    space = LayerSpace(max_depth=2)
    with pytest.raises(ValueError, match="'a.depth' is missing"):
        space.decode({}, "a")
    with pytest.raises(ValueError, match="a.depth = 3 is out of range"):
        space.decode({"a.depth": 3}, "a")
    with pytest.raises(ValueError, match="'a.b0.op' is missing"):
        space.decode({"a.depth": 1}, "a")
    with pytest.raises(ValueError, match="'c.e5' is missing"):
        CellSpace().decode({f"c.e{i}": "none" for i in range(5)}, "c")


# --------------------------------------------------------------------------- spec tables


def test_parse_genome_space() -> None:
    assert parse_genome_space("arch", {"type": "cell"}) == CellSpace()
    space = parse_genome_space("arch", {"type": "layers", "max_depth": 4, "widths": [16, 32]})
    assert space == LayerSpace(max_depth=4, widths=(16, 32))
    assert parse_genome_space("a", {"type": "layers", "max_params": 5000}).max_params == 5000


@pytest.mark.parametrize(
    ("table", "reason"),
    [
        ({"type": "mlp"}, r"arch\.type = 'mlp'"),
        ({}, r"arch\.type = None"),
        ({"type": "cell", "max_depth": 3}, r"arch\.max_depth: unknown key"),
        ({"type": "layers", "depth": 3}, r"arch\.depth: unknown key"),
        ({"type": "layers", "widths": 16}, r"arch\.widths = 16"),
        ({"type": "layers", "max_depth": "4"}, r"arch\.max_depth = '4'"),
        ({"type": "layers", "max_depth": True}, r"arch\.max_depth = True"),
        ({"type": "layers", "min_depth": 5, "max_depth": 4}, r"arch: max_depth 4"),
        ("cell", "expected a table"),
    ],
)
def test_parse_genome_space_errors(table: object, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_genome_space("arch", table)  # type: ignore[arg-type]


class _FakeTrial:
    """Records suggestions; answers with the first choice / the high end."""

    def __init__(self) -> None:
        self.params: dict[str, object] = {}

    def suggest_int(self, name: str, low: int, high: int) -> int:
        self.params[name] = high
        return high

    def suggest_categorical(self, name: str, choices):  # type: ignore[no-untyped-def]
        self.params[name] = choices[-1]
        return choices[-1]


def test_suggest_asks_only_for_blocks_below_depth() -> None:
    trial = _FakeTrial()
    genome = LayerSpace(max_depth=2).suggest(trial, "a")
    assert genome.depth == 2 and len(trial.params) == 1 + 2 * 5
    assert genome.blocks[0] == Block("identity", 64, 5, "tanh", True)
    cell = CellSpace().suggest(_FakeTrial(), "c")
    assert cell.edges == ("avg_pool_3x3",) * 6
