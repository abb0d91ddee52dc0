"""PyTorch models built from architecture genomes (``spaces.genomes``).

* :class:`~spaces.genomes.LayerGenome` -> :class:`LayerNet`: the blocks in order on the
  image (stride 1, "same" padding, no stem), then adaptive average pooling to at most
  :data:`HEAD_GRID` x :data:`HEAD_GRID` (4x4 for 8x8 digits; global pooling alone loses
  the layout a stride-1 stack needs) and a linear classifier on the flattened map.
  A block is ``y = act(op(x)) [+ proj(x) if skip]``: ``conv`` a ``k x k`` convolution
  with bias, ``sepconv`` a depthwise ``k x k`` (no bias) then a pointwise 1x1 (bias),
  ``pool`` a ``k x k`` average pool, ``identity`` nothing; a 1x1 projection without bias
  follows ``pool`` / ``identity`` and forms the skip whenever the channel count changes.
  The block stack's parameter count equals ``LayerSpace.count_params``.
* :class:`~spaces.genomes.CellGenome` -> :class:`CellNet`: NAS-Bench-201 style, a 3x3
  conv + BN stem to ``channels``, ``n_cells`` identical cells, BN + ReLU, global average
  pooling and a linear classifier. In a cell node ``j`` sums ``op(node_i)`` over
  ``i < j``; ``none`` gives zeros, ``skip_connect`` the input, ``nor_conv_kxk`` is
  ReLU -> conv (no bias) -> BN, ``avg_pool_3x3`` a 3x3 average pool; node 3 is the output.

Flat inputs ``input_shape == (D,)`` are treated as a ``(1, 1, D)`` image (one channel,
one row), so both genome kinds stay convolutional; the model reshapes ``(N, D)`` itself.

Weights come from the given ``torch.Generator`` only (the global torch RNG is left as
it was).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from spaces.genomes import CELL_EDGES, Block, CellGenome, LayerGenome
from trainers.models import init_weights

__all__ = [
    "CellNet",
    "HEAD_GRID",
    "LayerNet",
    "build_genome_model",
    "count_params_and_macs",
    "image_shape",
]

#: LayerNet pools the last feature map to at most HEAD_GRID x HEAD_GRID before its head.
HEAD_GRID = 4

_ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}


def image_shape(input_shape: Sequence[int]) -> tuple[int, int, int]:
    """``(C, H, W)`` for an image shape, ``(1, 1, D)`` for a flat one."""
    shape = tuple(int(s) for s in input_shape)
    if len(shape) == 1:
        shape = (1, 1, shape[0])
    if len(shape) != 3 or min(shape) < 1:
        raise ValueError(f"input_shape {tuple(input_shape)!r} must be (C, H, W) or (D,) with positive sizes")
    return shape


class _ToImage(nn.Module):
    def __init__(self, shape: tuple[int, int, int]) -> None:
        super().__init__()
        self.shape = shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], *self.shape)


def _projection(cin: int, cout: int) -> nn.Module:
    return nn.Identity() if cin == cout else nn.Conv2d(cin, cout, 1, bias=False)


class _LayerBlock(nn.Module):
    def __init__(self, block: Block, cin: int) -> None:
        super().__init__()
        k, w = block.kernel, block.width
        if block.op == "conv":
            self.op: nn.Module = nn.Conv2d(cin, w, k, padding=k // 2)
        elif block.op == "sepconv":
            self.op = nn.Sequential(
                nn.Conv2d(cin, cin, k, padding=k // 2, groups=cin, bias=False),
                nn.Conv2d(cin, w, 1),
            )
        elif block.op == "pool":
            self.op = nn.Sequential(
                nn.AvgPool2d(k, stride=1, padding=k // 2, count_include_pad=False),
                _projection(cin, w),
            )
        else:
            self.op = _projection(cin, w)
        self.act = _ACTIVATIONS[block.activation]()
        self.skip = _projection(cin, w) if block.skip else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(self.op(x))
        return y if self.skip is None else y + self.skip(x)


class LayerNet(nn.Module):
    """Blocks of a :class:`LayerGenome`, then global average pooling and a linear head."""

    def __init__(self, genome: LayerGenome, input_shape: Sequence[int], n_classes: int) -> None:
        super().__init__()
        shape = image_shape(input_shape)
        self.to_image = _ToImage(shape)
        blocks, cin = [], shape[0]
        for block in genome.blocks:
            blocks.append(_LayerBlock(block, cin))
            cin = block.width
        self.blocks = nn.Sequential(*blocks)
        pooled = (min(shape[1], HEAD_GRID), min(shape[2], HEAD_GRID))
        self.pool = nn.AdaptiveAvgPool2d(pooled)
        self.head = nn.Linear(cin * pooled[0] * pooled[1], n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.blocks(self.to_image(x)))
        return self.head(x.flatten(1))


def _cell_op(name: str, c: int) -> nn.Module:
    if name == "none":
        return _Zero()
    if name == "skip_connect":
        return nn.Identity()
    if name == "avg_pool_3x3":
        return nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)
    k = 1 if name == "nor_conv_1x1" else 3
    return nn.Sequential(nn.ReLU(), nn.Conv2d(c, c, k, padding=k // 2, bias=False), nn.BatchNorm2d(c))


class _Zero(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mul(0.0)


class _Cell(nn.Module):
    def __init__(self, genome: CellGenome, channels: int) -> None:
        super().__init__()
        self.edges = nn.ModuleList(_cell_op(op, channels) for op in genome.edges)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        nodes = [x]
        for to in (1, 2, 3):
            nodes.append(sum(edge(nodes[src]) for edge, (dst, src) in zip(self.edges, CELL_EDGES) if dst == to))
        return nodes[3]


class CellNet(nn.Module):
    """Stem, ``n_cells`` copies of one NAS-Bench-201 cell, BN + ReLU, pooling, linear head."""

    def __init__(
        self,
        genome: CellGenome,
        input_shape: Sequence[int],
        n_classes: int,
        channels: int = 16,
        n_cells: int = 2,
    ) -> None:
        super().__init__()
        if channels < 1 or n_cells < 1:
            raise ValueError(f"channels={channels} and n_cells={n_cells} must be >= 1")
        shape = image_shape(input_shape)
        self.to_image = _ToImage(shape)
        self.stem = nn.Sequential(nn.Conv2d(shape[0], channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels))
        self.cells = nn.Sequential(*(_Cell(genome, channels) for _ in range(n_cells)))
        self.last = nn.Sequential(nn.BatchNorm2d(channels), nn.ReLU())
        self.head = nn.Linear(channels, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.last(self.cells(self.stem(self.to_image(x))))
        return self.head(x.mean(dim=(2, 3)))


def build_genome_model(
    genome: LayerGenome | CellGenome,
    input_shape: tuple[int, ...],
    n_classes: int,
    generator: torch.Generator,
    *,
    cell_channels: int = 16,
    n_cells: int = 2,
) -> nn.Module:
    """The model for ``genome``; weights drawn from ``generator`` only.

    ``cell_channels`` and ``n_cells`` apply to cell genomes.
    """
    if not isinstance(n_classes, int) or isinstance(n_classes, bool) or n_classes < 1:
        raise ValueError(f"n_classes {n_classes!r} must be a positive int")
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator {generator!r} must be a torch.Generator")
    # Module constructors draw default weights from the global RNG; fork it so the
    # caller's global stream is untouched, then re-draw every weight from `generator`.
    with torch.random.fork_rng(devices=[]):
        if isinstance(genome, LayerGenome):
            model: nn.Module = LayerNet(genome, input_shape, n_classes)
        elif isinstance(genome, CellGenome):
            model = CellNet(genome, input_shape, n_classes, cell_channels, n_cells)
        else:
            raise ValueError(f"genome {genome!r} is neither a LayerGenome nor a CellGenome")
    init_weights(model, generator)
    return model


@torch.no_grad()
def count_params_and_macs(model: nn.Module, input_shape: tuple[int, ...]) -> tuple[int, int]:
    """``(parameters, multiply-accumulates)`` for one input of ``input_shape``.

    MACs count ``Conv2d`` (``out_elements * in_channels / groups * kh * kw``) and
    ``Linear`` (``in_features * out_features`` per row) via forward hooks; pooling,
    normalisation and activations are not counted.
    """
    params = sum(p.numel() for p in model.parameters())
    macs = 0

    def conv_hook(module: nn.Conv2d, inputs: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        nonlocal macs
        kh, kw = module.kernel_size
        macs += out.numel() // out.shape[0] * (module.in_channels // module.groups) * kh * kw

    def linear_hook(module: nn.Linear, inputs: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        nonlocal macs
        macs += out.numel() // out.shape[0] * module.in_features

    handles = []
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            handles.append(module.register_forward_hook(conv_hook))
        elif isinstance(module, nn.Linear):
            handles.append(module.register_forward_hook(linear_hook))
    was_training = model.training
    model.eval()
    try:
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
        model(torch.zeros((1, *input_shape), device=device))
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    return params, macs
