"""Models built from genomes: shapes, counts, seeded init, and a short training run on digits."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from spaces.genomes import Block, CellGenome, CellSpace, LayerGenome, LayerSpace
from trainers.genome_models import build_genome_model, count_params_and_macs

NB201_EXAMPLE = "|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|"
DIGITS = Path(__file__).resolve().parents[2] / "trainers" / "data" / "digits.csv.gz"


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


GENOMES = [
    LayerGenome(
        (
            Block("conv", 16, 3, "relu", False),
            Block("sepconv", 32, 5, "gelu", True),
            Block("pool", 32, 3, "tanh", True),
            Block("identity", 8, 1, "relu", False),
        )
    ),
    CellGenome.from_string(NB201_EXAMPLE),
    CellGenome(("none",) * 6),
]


@pytest.mark.parametrize("genome", GENOMES, ids=lambda g: g.to_string())
def test_forward_shape_and_counts(genome: LayerGenome | CellGenome) -> None:
    model = build_genome_model(genome, (1, 8, 8), 10, _gen())
    out = model(torch.randn(4, 1, 8, 8))
    assert out.shape == (4, 10)
    params, macs = count_params_and_macs(model, (1, 8, 8))
    assert params > 0 and macs > 0


@pytest.mark.slow
def test_every_sampled_layer_genome_builds_and_matches_space_count() -> None:
    space = LayerSpace()
    rng = np.random.default_rng(0)
    for _ in range(20):
        genome = space.sample(rng)
        model = build_genome_model(genome, (1, 8, 8), 10, _gen())
        assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
        params, _ = count_params_and_macs(model, (1, 8, 8))
        head = genome.blocks[-1].width * 4 * 4 * 10 + 10
        assert params == space.count_params(genome) + head


def test_tiny_layer_genome_by_hand() -> None:
    genome = LayerGenome((Block("conv", 8, 3, "relu", False),))
    model = build_genome_model(genome, (1, 8, 8), 10, _gen())
    # conv: 1*8*3*3 + 8 = 80 params, 8*8 positions * 8 channels * 9 = 4608 MACs
    # pooled to 8 x 4 x 4 = 128 features; head: 128*10 + 10 = 1290 params, 1280 MACs
    assert count_params_and_macs(model, (1, 8, 8)) == (80 + 1290, 4608 + 1280)


def test_tiny_cell_by_hand() -> None:
    genome = CellGenome(("nor_conv_1x1",) + ("none",) * 5)  # only edge 1<-0 is a conv
    model = build_genome_model(genome, (1, 8, 8), 10, _gen(), cell_channels=4, n_cells=1)
    # stem conv 1*4*9 = 36 + BN 8; cell: conv 4*4 = 16 + BN 8; last BN 8; head 4*10+10 = 50
    # MACs: stem 64*4*9 = 2304; cell conv 64*4*4 = 1024; head 40
    assert count_params_and_macs(model, (1, 8, 8)) == (36 + 8 + 16 + 8 + 8 + 50, 2304 + 1024 + 40)


def test_none_op_gives_zeros() -> None:
    model = build_genome_model(CellGenome(("none",) * 6), (1, 8, 8), 10, _gen())
    model.eval()
    a = model(torch.randn(3, 1, 8, 8))
    b = model(torch.randn(3, 1, 8, 8))
    assert torch.equal(a, b)  # the cell output is all zeros: logits are the head's bias


def test_flat_inputs_are_one_row_images() -> None:
    for genome in GENOMES:
        model = build_genome_model(genome, (64,), 10, _gen())
        assert model(torch.randn(5, 64)).shape == (5, 10)
        assert count_params_and_macs(model, (64,))[1] > 0


def test_init_comes_from_the_generator_only() -> None:
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a = build_genome_model(GENOMES[1], (1, 8, 8), 10, _gen(5))
    assert torch.equal(torch.random.get_rng_state(), before)  # global RNG untouched
    torch.manual_seed(999)
    b = build_genome_model(GENOMES[1], (1, 8, 8), 10, _gen(5))
    c = build_genome_model(GENOMES[1], (1, 8, 8), 10, _gen(6))
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="input_shape"):
        build_genome_model(GENOMES[0], (8, 8), 10, _gen())
    with pytest.raises(ValueError, match="n_classes 0"):
        build_genome_model(GENOMES[0], (1, 8, 8), 0, _gen())
    with pytest.raises(ValueError, match="neither"):
        build_genome_model("conv", (1, 8, 8), 10, _gen())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="torch.Generator"):
        build_genome_model(GENOMES[0], (1, 8, 8), 10, 0)  # type: ignore[arg-type]


def _digits() -> tuple[torch.Tensor, torch.Tensor]:
    with gzip.open(DIGITS, "rt") as f:
        data = np.loadtxt(f, delimiter=",", dtype=np.float32)
    x = torch.from_numpy(data[:, :64] / 16.0).reshape(-1, 1, 8, 8)
    return x, torch.from_numpy(data[:, 64].astype(np.int64))


@pytest.mark.slow
@pytest.mark.parametrize("genome", GENOMES[:2], ids=["layers", "cell"])
def test_trains_on_digits(genome: LayerGenome | CellGenome) -> None:
    x, y = _digits()
    x_train, y_train, x_test, y_test = x[:1200], y[:1200], x[1200:], y[1200:]
    model = build_genome_model(genome, (1, 8, 8), 10, _gen())
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    order = torch.Generator().manual_seed(0)
    for _ in range(4):
        for idx in torch.randperm(len(x_train), generator=order).split(64):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x_train[idx]), y_train[idx]).backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    assert accuracy > 0.75, accuracy


@pytest.mark.slow
def test_cell_space_models_all_build_for_a_sample() -> None:
    rng = np.random.default_rng(0)
    for _ in range(10):
        model = build_genome_model(CellSpace().sample(rng), (1, 8, 8), 10, _gen())
        assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
