"""The report's ``[elastic]`` section: each resized trial's segments, with their width, global batch, learning rate,
measured throughput, statistical efficiency and goodput (:mod:`search.reports.elastic_segments`)."""

from __future__ import annotations

from search.reports.data import CampaignData
from search.reports.elastic_segments import SegmentPace, resized, segment_paces
from search.reports.markup import LeftOut, Section, guard, md_table, note, table
from search.spec.elastic import ElasticSpec

__all__ = ["elastic_section", "MAX_TRIALS", "COLUMNS"]

MAX_TRIALS = 40  # resized trials shown, the best first: a table, not a dump

COLUMNS = (
    "trial",
    "segment",
    "epochs",
    "width",
    "global batch",
    "learning rate",
    "examples/s training",
    "examples/s with start-up",
    "efficiency",
    "goodput (examples/s)",
    "goodput per slot",
)


def elastic_section(data: CampaignData) -> Section:
    def build() -> tuple[str, str]:
        elastic = data.spec.elastic
        if elastic is None:
            raise LeftOut("not an elastic campaign (no [elastic] table)")
        grown = resized(data.records())
        if not grown:
            raise LeftOut("no trial changed its width")
        best = {t.number: i for i, t in enumerate(data.best(k=len(grown)))}
        shown = sorted(grown, key=lambda r: (best.get(r.number, len(best)), r.number))[:MAX_TRIALS]
        rows = [_row(p) for r in shown for p in segment_paces(r)]
        text = _summary(elastic, len(grown), len(shown))
        return note(text) + table(COLUMNS, rows), text + "\n\n" + md_table(COLUMNS, rows)

    return guard("Elastic trials", build)


def _summary(elastic: ElasticSpec, grown: int, shown: int) -> str:
    rule = f", lr_rule {elastic.lr_rule}" if elastic.lr_rule else ""
    settings = (
        f"widths {list(elastic.widths)}, grow at {elastic.grow}, batch {elastic.batch}{rule}, reserve "
        f"{elastic.reserve}, shrink {'on' if elastic.shrink else 'off'}"
    )
    which = f"{grown} trial(s) changed width" + (f"; the {shown} best shown" if shown < grown else "")
    return (
        f"{which} ({settings}). Per segment: the examples it trained over the seconds of its epochs (training, "
        "as the trainer timed them) and over its runs' seconds (start and rendezvous included); efficiency: the "
        "statistical efficiency of its global batch against the trial's first, from the gradient noise scale "
        "it reported (none: taken as that batch); goodput = examples/s training (else with start-up) x efficiency"
    )


def _row(p: SegmentPace) -> tuple[object, ...]:
    return (
        p.trial,
        f"{p.index}: {p.transition}",
        f"{p.start_epoch}..{p.end_epoch}",
        p.width,
        p.batch,
        _g(p.lr, ".3g"),
        _g(p.training_per_second, ",.0f"),
        _g(p.examples_per_second, ",.0f"),
        _g(p.efficiency, ".3f"),
        _g(p.goodput, ",.0f"),
        _g(p.goodput_per_slot, ",.0f"),
    )


def _g(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)
