"""Architectures drawn: a NAS-Bench-201 cell as its graph, a layer genome as its stack of blocks.

A cell (:class:`~spaces.genomes.CellGenome`) has four nodes (0: the cell's input, 3: its output)
and an op on each of its six edges ``j -> i`` (j < i); an edge whose op is ``none`` carries
nothing and is drawn faint and dashed, ``skip_connect`` plain, the others with their op written
on them. A layer genome (:class:`~spaces.genomes.LayerGenome`) is a column of boxes from input
to output, a curved arrow beside each block with a skip connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch

from search.reports.plots import Drawn, _drawn, _figure
from spaces.genomes import CELL_EDGES, CellGenome, LayerGenome

__all__ = ["draw_genomes", "parse_genome", "OP_LABELS"]

#: How each NAS-Bench-201 op is written on its edge.
OP_LABELS = {
    "none": "none",
    "skip_connect": "skip",
    "nor_conv_1x1": "conv 1x1",
    "nor_conv_3x3": "conv 3x3",
    "avg_pool_3x3": "avg pool 3x3",
}
_NODES = {0: (0.0, 0.0), 1: (1.0, 0.0), 2: (2.0, 0.0), 3: (3.0, 0.0)}  # in a row: input, two inner nodes, output
_BENDS = {1: 0.0, 2: -0.55, 3: 0.4}  # by how many nodes an edge skips: straight, arcs above, the long one below
_OP_COLORS = {
    "nor_conv_1x1": "#1f77b4",
    "nor_conv_3x3": "#d62728",
    "avg_pool_3x3": "#2ca02c",
    "skip_connect": "#555555",
    "none": "#bbbbbb",
}


def parse_genome(text: str) -> CellGenome | LayerGenome | None:
    """The genome a canonical string names (a cell's ``|op~0|+...``, else a layer stack); None when neither."""
    for kind in (CellGenome, LayerGenome):
        try:
            return kind.from_string(text)
        except ValueError:
            continue
    return None


def draw_genomes(genomes: Sequence[tuple[str, CellGenome | LayerGenome]]) -> Drawn:
    """One panel per ``(title, genome)``, three per row."""
    cols = min(3, len(genomes))
    rows = -(-len(genomes) // cols)
    cells = all(isinstance(g, CellGenome) for _t, g in genomes)
    tallest = max((g.depth for _t, g in genomes if isinstance(g, LayerGenome)), default=1)
    height = 2.1 if cells else 0.55 * tallest + 1.6
    fig = _figure(3.8 * cols, height * rows)
    axes = fig.subplots(rows, cols, squeeze=False).flat
    legend: list[str] = []
    for ax, (title, genome) in zip(axes, genomes, strict=False):
        if isinstance(genome, CellGenome):
            _cell(ax, genome)
        else:
            _layers(ax, genome, tallest)
        ax.set_title(title, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_axis_off()
    for ax in list(fig.axes)[len(genomes) :]:
        ax.set_visible(False)
    if any(isinstance(g, CellGenome) for _t, g in genomes):
        legend.append("cell: node 0 is the input, node 3 the output; a faint dashed edge is 'none' (no connection)")
    if any(isinstance(g, LayerGenome) for _t, g in genomes):
        legend.append("layers: input at the top; a curved arrow is a block's skip connection")
    return _drawn(fig, legend)


def _cell(ax: Any, genome: CellGenome) -> None:
    for (dst, src), op in zip(CELL_EDGES, genome.edges, strict=True):
        (x0, y0), (x1, y1) = _NODES[src], _NODES[dst]
        bend = _BENDS[dst - src]
        faint = op == "none"
        ax.add_patch(
            FancyArrowPatch(
                (x0, y0),
                (x1, y1),
                connectionstyle=f"arc3,rad={bend}",
                arrowstyle="-|>",
                mutation_scale=9,
                shrinkA=9,
                shrinkB=9,
                color=_OP_COLORS.get(op, "#000000"),
                lw=0.8 if faint else 1.6,
                ls="--" if faint else "-",
                alpha=0.6 if faint else 1.0,
            )
        )
        if not faint:  # on the arc's middle: matplotlib's arc3 bends by rad times the chord, sideways
            mx, my = (x0 + x1) / 2 + bend * (y1 - y0) / 2, (y0 + y1) / 2 - bend * (x1 - x0) / 2
            ax.text(
                mx,
                my,
                OP_LABELS.get(op, op),
                fontsize=7,
                ha="center",
                va="center",
                color=_OP_COLORS.get(op, "#000000"),
                bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.9},
            )
    for node, (x, y) in _NODES.items():
        ax.add_patch(Circle((x, y), 0.13, fc="#f3f3f3", ec="#333333", zorder=3))
        ax.text(x, y, str(node), ha="center", va="center", fontsize=8, zorder=4)
    ax.text(0, -0.3, "in", ha="center", va="top", fontsize=7, color="#555555")
    ax.text(3, -0.3, "out", ha="center", va="top", fontsize=7, color="#555555")
    ax.set_xlim(-0.3, 3.3)
    ax.set_ylim(-0.95, 0.75)
    ax.set_aspect("equal")


def _layers(ax: Any, genome: LayerGenome, tallest: int) -> None:
    """The blocks from the top down, on the scale of the ``tallest`` genome drawn beside it."""
    n = genome.depth
    ys = [tallest - i for i in range(n)]
    for y, block in zip(ys, genome.blocks, strict=True):
        ax.add_patch(FancyBboxPatch((0.1, y - 0.32), 2.8, 0.64, boxstyle="round,pad=0.02", fc="#eef3fa", ec="#1f77b4"))
        ax.text(
            1.5,
            y,
            f"{block.op} {block.kernel}x{block.kernel}, {block.width} ch, {block.activation}",
            ha="center",
            va="center",
            fontsize=8,
        )
        if block.skip:
            ax.add_patch(
                FancyArrowPatch(
                    (2.95, y + 0.45),
                    (2.95, y - 0.45),
                    connectionstyle="arc3,rad=-0.6",
                    arrowstyle="-|>",
                    mutation_scale=8,
                    color="#d62728",
                    lw=1.2,
                )
            )
    for y in ys[1:]:
        ax.annotate("", (1.5, y + 0.33), (1.5, y + 0.67), arrowprops={"arrowstyle": "-|>", "color": "#555555"})
    ax.text(1.5, tallest + 0.6, "input", ha="center", va="center", fontsize=8, color="#555555")
    ax.text(1.5, ys[-1] - 0.6, "head", ha="center", va="center", fontsize=8, color="#555555")
    ax.set_xlim(0, 3.6)
    ax.set_ylim(0.1, tallest + 0.9)
