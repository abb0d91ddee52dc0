"""The report's population-based training section: every rung's ranking, who copied whom, and where each member ended.

Read from ``pbt.jsonl`` (:class:`~search.pbt.journal.PBTJournal`) and the members' records:
per rung, the members ranked and the exploits (source, explored parameters); per member,
its lineage and the parameters it ended with (its last segment's config).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from search.pbt.journal import PBTJournal
from search.pbt.policy import Action
from search.reports.data import CampaignData
from search.reports.markup import LeftOut, Section, guard, md_table, note, table

__all__ = ["pbt_section"]


def pbt_section(data: CampaignData) -> Section:
    def build() -> tuple[str, str]:
        if data.spec.pbt is None:
            raise LeftOut("not a population-based training campaign")
        rungs = PBTJournal(data.folder.root).rungs()
        if not rungs:
            raise LeftOut("no rung was decided (no pbt.jsonl, or no member reached the first segment end)")
        names = data.spec.pbt.hyperparams
        rung_cols = ("epoch", "members ranked", "exploits (member <- source: explored parameters)")
        rung_rows = [
            (
                e,
                len(r.scores),
                "; ".join(
                    f"{n} <- {d.source}: {_params(d.params, names)}"
                    for n, d in sorted(r.decisions.items())
                    if d.action is Action.EXPLOIT
                )
                or "none",
            )
            for e, r in rungs.items()
        ]
        member_cols = ("trial", "state", "lineage (epoch: source)", "ended with")
        member_rows = []
        for record in data.records():
            lineage = [
                f"{e}: {r.decisions[record.number].source}"
                for e, r in rungs.items()
                if record.number in r.decisions and r.decisions[record.number].action is Action.EXPLOIT
            ]
            member_rows.append(
                (
                    record.number,
                    record.state_name,
                    ", ".join(lineage) or "own weights throughout",
                    _params(record.trainer_params, names),
                )
            )
        exploits = sum(1 for r in rungs.values() for d in r.decisions.values() if d.action is Action.EXPLOIT)
        text = (
            f"{len(rungs)} rung(s) decided, {exploits} exploit(s); each rung ranks every member still in the "
            f"population at that epoch"
        )
        body = note(text) + table(rung_cols, rung_rows) + table(member_cols, member_rows)
        md = text + "\n\n" + md_table(rung_cols, rung_rows) + "\n\n" + md_table(member_cols, member_rows)
        return body, md

    return guard("Population-based training", build)


def _params(params: Mapping[str, Any], names: tuple[str, ...]) -> str:
    shown = [(k, params[k]) for k in names if k in params]
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown)
