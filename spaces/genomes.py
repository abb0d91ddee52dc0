"""Architecture genomes: layer sequences and NAS-Bench-201 cells, as pure data.

Two search spaces, each a frozen dataclass describing the limits of its genomes:

* :class:`LayerSpace` / :class:`LayerGenome` -- a sequence of 1..6 :class:`Block` s
  (``conv``, ``sepconv``, ``pool``, ``identity``) with a width, a kernel, an
  activation and an optional residual skip.
* :class:`CellSpace` / :class:`CellGenome` -- the NAS-Bench-201 cell: 4 nodes, 6 edges,
  5 operations per edge, 15,625 cells.

Each space turns its genomes into flat Optuna parameters and back
(:meth:`distributions`, :meth:`encode`, :meth:`decode`, :meth:`suggest`), samples
uniformly with an explicit ``numpy.random.Generator`` and validates. Each genome has a
canonical string (:meth:`to_string` / :meth:`from_string`). Only the standard library,
numpy and ``optuna.distributions`` are imported here.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import numpy as np
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution

__all__ = [
    "ACTIVATIONS",
    "CELL_EDGES",
    "CELL_OPS",
    "KERNELS",
    "LAYER_OPS",
    "Block",
    "CellGenome",
    "CellSpace",
    "Genome",
    "GenomeSpace",
    "LayerGenome",
    "LayerSpace",
    "SupportsSuggest",
    "parse_genome_space",
]

LAYER_OPS: tuple[str, ...] = ("conv", "sepconv", "pool", "identity")
ACTIVATIONS: tuple[str, ...] = ("relu", "gelu", "tanh")
KERNELS: tuple[int, ...] = (1, 3, 5)

CELL_OPS: tuple[str, ...] = (
    "none",
    "skip_connect",
    "nor_conv_1x1",
    "nor_conv_3x3",
    "avg_pool_3x3",
)
#: ``(to_node, from_node)`` for each of the 6 edges, in NAS-Bench-201 string order.
CELL_EDGES: tuple[tuple[int, int], ...] = ((1, 0), (2, 0), (2, 1), (3, 0), (3, 1), (3, 2))

_SAMPLE_ATTEMPTS = 1000


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


class SupportsSuggest(Protocol):
    """The two ``optuna.trial.Trial`` methods :meth:`LayerSpace.suggest` needs."""

    def suggest_int(self, name: str, low: int, high: int) -> int: ...

    def suggest_categorical(self, name: str, choices: Any) -> Any: ...


# --------------------------------------------------------------------------- layers


@dataclasses.dataclass(frozen=True)
class Block:
    """One layer: ``y = activation(op(x))``, plus ``x`` (projected if needed) when ``skip``.

    ``width`` is the number of output channels of every op; ``pool`` and ``identity``
    project with a 1x1 convolution when the input has another number of channels.
    ``kernel`` is the convolution or pooling window (stride 1, "same" padding).
    """

    op: str
    width: int
    kernel: int
    activation: str
    skip: bool

    def __post_init__(self) -> None:
        if self.op not in LAYER_OPS:
            raise ValueError(f"block op {self.op!r} is unknown; must be one of {LAYER_OPS}")
        if not _is_int(self.width) or self.width < 1:
            raise ValueError(f"block width {self.width!r} must be a positive int")
        if not _is_int(self.kernel) or self.kernel not in KERNELS:
            raise ValueError(f"block kernel {self.kernel!r} must be one of {KERNELS}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"block activation {self.activation!r} is unknown; must be one of {ACTIVATIONS}")
        if not isinstance(self.skip, (bool, np.bool_)):
            raise ValueError(f"block skip {self.skip!r} must be a bool")
        object.__setattr__(self, "width", int(self.width))
        object.__setattr__(self, "kernel", int(self.kernel))
        object.__setattr__(self, "skip", bool(self.skip))

    def to_string(self) -> str:
        """``op:w<width>:k<kernel>:<activation>:skip|noskip``, e.g. ``conv:w32:k3:relu:skip``."""
        skip = "skip" if self.skip else "noskip"
        return f"{self.op}:w{self.width}:k{self.kernel}:{self.activation}:{skip}"

    @classmethod
    def from_string(cls, text: str) -> Block:
        """Parse :meth:`to_string`'s format."""
        parts = text.strip().split(":")
        if (
            len(parts) != 5
            or not parts[1].startswith("w")
            or not parts[2].startswith("k")
            or parts[4] not in ("skip", "noskip")
        ):
            raise ValueError(f"block {text!r} is not in the form 'op:w<width>:k<kernel>:<activation>:skip|noskip'")
        try:
            width, kernel = int(parts[1][1:]), int(parts[2][1:])
        except ValueError:
            raise ValueError(f"block {text!r}: width and kernel must be integers") from None
        return cls(parts[0], width, kernel, parts[3], parts[4] == "skip")


@dataclasses.dataclass(frozen=True)
class LayerGenome:
    """A non-empty sequence of blocks, applied in order (stride 1 throughout)."""

    blocks: tuple[Block, ...]

    def __post_init__(self) -> None:
        blocks = tuple(self.blocks)
        if not blocks:
            raise ValueError("layer genome has depth 0; it needs at least one block")
        for i, block in enumerate(blocks):
            if not isinstance(block, Block):
                raise ValueError(f"layer genome block {i} is {block!r}, not a Block")
        object.__setattr__(self, "blocks", blocks)

    @property
    def depth(self) -> int:
        return len(self.blocks)

    def to_string(self) -> str:
        """Blocks' strings joined by ``|``, e.g. ``conv:w32:k3:relu:noskip|pool:w32:k3:relu:skip``."""
        return "|".join(block.to_string() for block in self.blocks)

    @classmethod
    def from_string(cls, text: str) -> LayerGenome:
        """Parse :meth:`to_string`'s format."""
        if not text.strip():
            raise ValueError("layer genome string is empty; it needs at least one block")
        return cls(tuple(Block.from_string(part) for part in text.split("|")))


@dataclasses.dataclass(frozen=True)
class LayerSpace:
    """Limits of layer genomes.

    ``max_params`` (optional) bounds :meth:`count_params`: the parameters of the block
    stack for ``in_channels`` input channels, without the classifier head (which
    depends on the number of classes).
    """

    min_depth: int = 1
    max_depth: int = 6
    widths: tuple[int, ...] = (8, 16, 32, 64)
    kernels: tuple[int, ...] = KERNELS
    max_params: int | None = None
    in_channels: int = 1

    def __post_init__(self) -> None:
        if not _is_int(self.min_depth) or self.min_depth < 1:
            raise ValueError(f"min_depth {self.min_depth!r} must be an int >= 1")
        if not _is_int(self.max_depth) or self.max_depth < self.min_depth:
            raise ValueError(f"max_depth {self.max_depth!r} must be an int >= min_depth ({self.min_depth})")
        widths = tuple(self.widths)
        if not widths or any(not _is_int(w) or w < 1 for w in widths):
            raise ValueError(f"widths {self.widths!r} must be a non-empty list of positive ints")
        if len(set(widths)) != len(widths):
            raise ValueError(f"widths {self.widths!r} must not repeat a value")
        kernels = tuple(self.kernels)
        if not kernels or any(k not in KERNELS or not _is_int(k) for k in kernels):
            raise ValueError(f"kernels {self.kernels!r} must be a non-empty subset of {KERNELS}")
        if len(set(kernels)) != len(kernels):
            raise ValueError(f"kernels {self.kernels!r} must not repeat a value")
        if not _is_int(self.in_channels) or self.in_channels < 1:
            raise ValueError(f"in_channels {self.in_channels!r} must be a positive int")
        object.__setattr__(self, "widths", tuple(int(w) for w in widths))
        object.__setattr__(self, "kernels", tuple(int(k) for k in kernels))
        if self.max_params is not None:
            if not _is_int(self.max_params) or self.max_params < 1:
                raise ValueError(f"max_params {self.max_params!r} must be a positive int or None")
            smallest = self.count_params(self._smallest_genome())
            if self.max_params < smallest:
                raise ValueError(
                    f"max_params {self.max_params} admits no genome: the smallest one "
                    f"({self.min_depth} identity block(s)) has {smallest} parameters"
                )

    def _smallest_genome(self) -> LayerGenome:
        near = min(self.widths, key=lambda w: (w != self.in_channels, w))
        block = Block("identity", near, self.kernels[0], ACTIVATIONS[0], False)
        return LayerGenome((block,) * self.min_depth)

    # -- validation and size

    def count_params(self, genome: LayerGenome) -> int:
        """Parameters of the block stack, computed as ``trainers.genome_models`` builds it."""
        total, cin = 0, self.in_channels
        for b in genome.blocks:
            proj = cin * b.width if cin != b.width else 0
            if b.op == "conv":
                total += cin * b.width * b.kernel * b.kernel + b.width
            elif b.op == "sepconv":
                total += cin * b.kernel * b.kernel + cin * b.width + b.width
            else:  # pool, identity: only a 1x1 projection (no bias) when channels change
                total += proj
            if b.skip:
                total += proj
            cin = b.width
        return total

    def validate(self, genome: LayerGenome) -> None:
        """Raise ``ValueError`` naming the first rule ``genome`` breaks."""
        if not isinstance(genome, LayerGenome):
            raise ValueError(f"{genome!r} is not a LayerGenome")
        if not self.min_depth <= genome.depth <= self.max_depth:
            raise ValueError(f"depth {genome.depth} is out of range [{self.min_depth}, {self.max_depth}]")
        for i, b in enumerate(genome.blocks):
            if b.width not in self.widths:
                raise ValueError(f"block {i}: width {b.width} is not allowed; widths are {self.widths}")
            if b.kernel not in self.kernels:
                raise ValueError(f"block {i}: kernel {b.kernel} is not allowed; kernels are {self.kernels}")
        if self.max_params is not None:
            n = self.count_params(genome)
            if n > self.max_params:
                raise ValueError(f"genome has {n} parameters, more than max_params={self.max_params}")

    def is_valid(self, genome: LayerGenome) -> bool:
        try:
            self.validate(genome)
        except ValueError:
            return False
        return True

    # -- sampling

    def sample_block(self, rng: np.random.Generator) -> Block:
        """A uniformly random block (each field uniform over its allowed values)."""
        return Block(
            op=LAYER_OPS[rng.integers(len(LAYER_OPS))],
            width=self.widths[rng.integers(len(self.widths))],
            kernel=self.kernels[rng.integers(len(self.kernels))],
            activation=ACTIVATIONS[rng.integers(len(ACTIVATIONS))],
            skip=bool(rng.integers(2)),
        )

    def sample(self, rng: np.random.Generator) -> LayerGenome:
        """Depth uniform in ``[min_depth, max_depth]``, then each block uniform.

        This is the distribution Optuna's ``RandomSampler`` gives on :meth:`distributions`.
        With ``max_params``, over-budget draws are rejected (so the result is uniform over
        the admitted genomes of that law).
        """
        for _ in range(_SAMPLE_ATTEMPTS):
            depth = int(rng.integers(self.min_depth, self.max_depth + 1))
            genome = LayerGenome(tuple(self.sample_block(rng) for _ in range(depth)))
            if self.max_params is None or self.count_params(genome) <= self.max_params:
                return genome
        raise ValueError(
            f"max_params={self.max_params} is too tight: no admissible genome in {_SAMPLE_ATTEMPTS} random draws"
        )

    # -- flat Optuna parameters

    def distributions(self, prefix: str) -> dict[str, BaseDistribution]:
        """``{prefix}.depth`` and ``{prefix}.b<i>.{op,width,kernel,activation,skip}`` for
        every ``i < max_depth``; blocks at or beyond the depth are ignored by :meth:`decode`."""
        out: dict[str, BaseDistribution] = {f"{prefix}.depth": IntDistribution(self.min_depth, self.max_depth)}
        for i in range(self.max_depth):
            out.update(self._block_distributions(prefix, i))
        return out

    def _block_distributions(self, prefix: str, i: int) -> dict[str, BaseDistribution]:
        p = f"{prefix}.b{i}"
        return {
            f"{p}.op": CategoricalDistribution(LAYER_OPS),
            f"{p}.width": CategoricalDistribution(self.widths),
            f"{p}.kernel": CategoricalDistribution(self.kernels),
            f"{p}.activation": CategoricalDistribution(ACTIVATIONS),
            f"{p}.skip": CategoricalDistribution((False, True)),
        }

    def encode(self, genome: LayerGenome, prefix: str) -> dict[str, Any]:
        """All :meth:`distributions` names -> builtin values; blocks past the depth are
        filled with each field's first choice."""
        self.validate(genome)
        filler = Block(LAYER_OPS[0], self.widths[0], self.kernels[0], ACTIVATIONS[0], False)
        out: dict[str, Any] = {f"{prefix}.depth": genome.depth}
        for i in range(self.max_depth):
            b = genome.blocks[i] if i < genome.depth else filler
            p = f"{prefix}.b{i}"
            out.update(
                {
                    f"{p}.op": b.op,
                    f"{p}.width": b.width,
                    f"{p}.kernel": b.kernel,
                    f"{p}.activation": b.activation,
                    f"{p}.skip": b.skip,
                }
            )
        return out

    def decode(self, params: Mapping[str, Any], prefix: str) -> LayerGenome:
        """The genome in ``params`` (only ``depth`` and blocks below it are read)."""
        depth = _lookup(params, f"{prefix}.depth")
        if not _is_int(depth):
            raise ValueError(f"{prefix}.depth = {depth!r} must be an int")
        if not self.min_depth <= depth <= self.max_depth:
            raise ValueError(f"{prefix}.depth = {depth} is out of range [{self.min_depth}, {self.max_depth}]")
        blocks = []
        for i in range(int(depth)):
            p = f"{prefix}.b{i}"
            blocks.append(
                Block(
                    op=_lookup(params, f"{p}.op"),
                    width=_lookup(params, f"{p}.width"),
                    kernel=_lookup(params, f"{p}.kernel"),
                    activation=_lookup(params, f"{p}.activation"),
                    skip=_lookup(params, f"{p}.skip"),
                )
            )
        genome = LayerGenome(tuple(blocks))
        self.validate(genome)
        return genome

    def suggest(self, trial: SupportsSuggest, prefix: str) -> LayerGenome:
        """Suggest ``{prefix}.depth`` then the parameters of the first ``depth`` blocks."""
        depth = trial.suggest_int(f"{prefix}.depth", self.min_depth, self.max_depth)
        params: dict[str, Any] = {f"{prefix}.depth": depth}
        for i in range(depth):
            for name, dist in self._block_distributions(prefix, i).items():
                assert isinstance(dist, CategoricalDistribution)
                params[name] = trial.suggest_categorical(name, dist.choices)
        return self.decode(params, prefix)


# --------------------------------------------------------------------------- cells


@dataclasses.dataclass(frozen=True)
class CellGenome:
    """A NAS-Bench-201 cell: one op per edge, edges in :data:`CELL_EDGES` order."""

    edges: tuple[str, ...]

    def __post_init__(self) -> None:
        edges = tuple(self.edges)
        if len(edges) != len(CELL_EDGES):
            raise ValueError(f"cell genome has {len(edges)} edges; it needs {len(CELL_EDGES)}")
        for i, op in enumerate(edges):
            if op not in CELL_OPS:
                raise ValueError(f"cell edge {i} op {op!r} is unknown; must be one of {CELL_OPS}")
        object.__setattr__(self, "edges", edges)

    def to_string(self) -> str:
        """NAS-Bench-201 format: ``|op~0|+|op~0|op~1|+|op~0|op~1|op~2|``, e.g.
        ``|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|``
        (node 1, then node 2, then node 3; ``~i`` is the input node)."""
        nodes: list[str] = []
        for to in (1, 2, 3):
            ops = [f"{op}~{src}" for (dst, src), op in zip(CELL_EDGES, self.edges) if dst == to]
            nodes.append("|" + "|".join(ops) + "|")
        return "+".join(nodes)

    @classmethod
    def from_string(cls, text: str) -> CellGenome:
        """Parse the NAS-Bench-201 format written by :meth:`to_string`."""
        form = "'|op~0|+|op~0|op~1|+|op~0|op~1|op~2|'"
        nodes = text.strip().split("+")
        if len(nodes) != 3:
            raise ValueError(f"cell string {text!r} must have 3 nodes joined by '+', like {form}")
        edges: list[str] = []
        for to, node in enumerate(nodes, start=1):
            if not (node.startswith("|") and node.endswith("|")) or len(node) < 2:
                raise ValueError(f"cell string {text!r}: node {to} {node!r} must be wrapped in '|'")
            items = node[1:-1].split("|")
            if len(items) != to:
                raise ValueError(f"cell string {text!r}: node {to} has {len(items)} inputs; it needs {to}")
            for src, item in enumerate(items):
                op, sep, idx = item.partition("~")
                if not sep or idx != str(src):
                    raise ValueError(f"cell string {text!r}: {item!r} must be '<op>~{src}' (node {to})")
                edges.append(op)
        return cls(tuple(edges))


@dataclasses.dataclass(frozen=True)
class CellSpace:
    """All 5**6 = 15,625 NAS-Bench-201 cells."""

    @property
    def size(self) -> int:
        return len(CELL_OPS) ** len(CELL_EDGES)

    def all_genomes(self) -> Iterator[CellGenome]:
        """Every cell, in lexicographic order of op indices (edge 0 slowest)."""
        for ops in itertools.product(CELL_OPS, repeat=len(CELL_EDGES)):
            yield CellGenome(ops)

    def index(self, genome: CellGenome) -> int:
        """Position of ``genome`` in :meth:`all_genomes` (a base-5 number)."""
        self.validate(genome)
        out = 0
        for op in genome.edges:
            out = out * len(CELL_OPS) + CELL_OPS.index(op)
        return out

    def validate(self, genome: CellGenome) -> None:
        """Raise ``ValueError`` unless ``genome`` is a ``CellGenome`` (which validates itself)."""
        if not isinstance(genome, CellGenome):
            raise ValueError(f"{genome!r} is not a CellGenome")

    def is_valid(self, genome: CellGenome) -> bool:
        return isinstance(genome, CellGenome)

    def sample(self, rng: np.random.Generator) -> CellGenome:
        """Each edge's op uniform and independent: uniform over the 15,625 cells."""
        idx = rng.integers(len(CELL_OPS), size=len(CELL_EDGES))
        return CellGenome(tuple(CELL_OPS[i] for i in idx))

    def distributions(self, prefix: str) -> dict[str, BaseDistribution]:
        """``{prefix}.e0`` .. ``{prefix}.e5``, one categorical over :data:`CELL_OPS` each."""
        return {f"{prefix}.e{i}": CategoricalDistribution(CELL_OPS) for i in range(len(CELL_EDGES))}

    def encode(self, genome: CellGenome, prefix: str) -> dict[str, Any]:
        self.validate(genome)
        return {f"{prefix}.e{i}": op for i, op in enumerate(genome.edges)}

    def decode(self, params: Mapping[str, Any], prefix: str) -> CellGenome:
        return CellGenome(tuple(_lookup(params, f"{prefix}.e{i}") for i in range(len(CELL_EDGES))))

    def suggest(self, trial: SupportsSuggest, prefix: str) -> CellGenome:
        """Suggest the six edge ops."""
        return self.decode(
            {name: trial.suggest_categorical(name, CELL_OPS) for name in self.distributions(prefix)},
            prefix,
        )


Genome = LayerGenome | CellGenome
GenomeSpace = LayerSpace | CellSpace


def _lookup(params: Mapping[str, Any], name: str) -> Any:
    if name not in params:
        raise ValueError(f"parameter {name!r} is missing")
    return params[name]


# --------------------------------------------------------------------------- spec tables

_LAYER_KEYS = ("type", "min_depth", "max_depth", "widths", "kernels", "max_params", "in_channels")


def parse_genome_space(name: str, table: Mapping[str, Any]) -> LayerSpace | CellSpace:
    """Build a space from a spec table such as ``{type = "layers", max_depth = 4}`` or
    ``{type = "cell"}``; errors name ``<name>.<key>``."""
    if not isinstance(table, Mapping):
        raise ValueError(f"{name}: expected a table, got {table!r}")
    kind = table.get("type")
    if kind == "cell":
        extra = sorted(set(table) - {"type"})
        if extra:
            raise ValueError(f"{name}.{extra[0]}: unknown key for a cell space; allowed: type")
        return CellSpace()
    if kind != "layers":
        raise ValueError(f"{name}.type = {kind!r}: must be 'layers' or 'cell'")
    kwargs: dict[str, Any] = {}
    for key, value in table.items():
        if key == "type":
            continue
        if key not in _LAYER_KEYS:
            raise ValueError(f"{name}.{key}: unknown key for a layers space; allowed: {', '.join(_LAYER_KEYS)}")
        if key in ("widths", "kernels"):
            if not isinstance(value, (list, tuple)) or not all(_is_int(v) for v in value):
                raise ValueError(f"{name}.{key} = {value!r}: must be a list of integers")
            value = tuple(int(v) for v in value)
        elif key == "max_params" and value is None:
            pass
        elif not _is_int(value):
            raise ValueError(f"{name}.{key} = {value!r}: must be an integer")
        kwargs[key] = value
    try:
        return LayerSpace(**kwargs)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
