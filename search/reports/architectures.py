"""The report's architecture section: the best trials' genomes drawn (cells as graphs, layer stacks as boxes),
each with its string, so a reader sees what won rather than a long line of ``|op~0|+...``."""

from __future__ import annotations

from search.reports.data import CampaignData, genome_of
from search.reports.genome_plots import draw_genomes, parse_genome
from search.reports.markup import LeftOut, Section, figure, guard, md_table, table

__all__ = ["architectures", "SHOWN"]

SHOWN = 6  # the best trials whose architectures are drawn


def architectures(data: CampaignData) -> Section:
    def build() -> tuple[str, str]:
        if not any(len(p.distributions()) > 1 for p in data.spec.space):
            raise LeftOut("the space searches no architecture")
        top = data.best(k=SHOWN)[:SHOWN]
        if not top:
            raise LeftOut("no complete trial yet")
        drawn = []
        rows = []
        for rank, trial in enumerate(top, 1):
            text = genome_of(data.record(trial), data.spec.space)
            genome = parse_genome(text.split(" ")[0]) if text else None
            values = ", ".join(f"{m} {v:.4g}" for m, v in zip(data.metrics, trial.values or (), strict=False))
            where = "" if data.spec.study.multi_objective else f"#{rank}: "
            if genome is not None:
                drawn.append((f"{where}trial {trial.number} ({values})", genome))
            rows.append((trial.number, values, text or "not recorded"))
        if not drawn:
            raise LeftOut("the best trials recorded no architecture this report can draw")
        which = "the Pareto front's trials" if data.spec.study.multi_objective else f"the {len(top)} best trials"
        body = figure(draw_genomes(drawn), f"architectures of {which}")
        columns = ("trial", "objective", "genome")
        body += table(columns, rows)
        md = f"Architectures of {which} (drawn in index.html):\n\n" + md_table(columns, rows)
        return body, md

    front = data.spec.study.multi_objective
    return guard("Architectures of the Pareto front" if front else "Architectures of the best trials", build)
