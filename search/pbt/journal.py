"""The population's decisions on disk: ``pbt.jsonl`` in the campaign folder, appended and fsynced.

Each rung's decisions are written (and synced) before any of them is acted on, so a
controller killed at any moment leaves either no decision for that rung (it is decided
again, the same way: :class:`~search.pbt.policy.PBTPolicy` seeds each rung) or the
decision itself. A second line marks the rung's checkpoint copies done; a rung decided
but not marked is copied again on ``resume`` (from snapshots that never change). A line
torn by a crash mid-write is skipped.

Lines::

    {"rung": 3, "scores": {"0": 0.91, ...}, "decisions": {"0": {"action": "continue", "source": null,
     "params": {...}}, ...}}
    {"applied": 3}
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from search.pbt.policy import Action, Decision

__all__ = ["JOURNAL_NAME", "RungRecord", "PBTJournal"]

JOURNAL_NAME = "pbt.jsonl"


@dataclasses.dataclass(frozen=True)
class RungRecord:
    """One decided rung: every member's score there and what it does next."""

    epoch: int
    scores: dict[int, float]
    decisions: dict[int, Decision]
    applied: bool = False


class PBTJournal:
    """Append-only, fsynced record of the rungs decided (``<campaign>/pbt.jsonl``)."""

    def __init__(self, root: Path) -> None:
        self.path = Path(root) / JOURNAL_NAME

    def rungs(self) -> dict[int, RungRecord]:
        """Every rung decided so far, by epoch, with whether its copies were made."""
        found: dict[int, RungRecord] = {}
        for line in self._lines():
            if "rung" in line:
                record = _rung_of(line)
                found.setdefault(record.epoch, record)  # the first decision of a rung stands
            elif "applied" in line and int(line["applied"]) in found:
                found[int(line["applied"])] = dataclasses.replace(found[int(line["applied"])], applied=True)
        return dict(sorted(found.items()))

    def decided(self, epoch: int, scores: Mapping[int, float], decisions: Mapping[int, Decision]) -> None:
        self._append(
            {
                "rung": int(epoch),
                "scores": {str(n): _finite_or_none(s) for n, s in sorted(scores.items())},
                "decisions": {
                    str(n): {"action": d.action.value, "source": d.source, "params": dict(d.params)}
                    for n, d in sorted(decisions.items())
                },
            }
        )

    def applied(self, epoch: int) -> None:
        self._append({"applied": int(epoch)})

    def _append(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, sort_keys=True, allow_nan=False) + "\n"
        with open(self.path, "a+b") as fh:
            end = fh.seek(0, os.SEEK_END)
            torn = end > 0 and fh.seek(end - 1) >= 0 and fh.read(1) != b"\n"
            fh.write((("\n" if torn else "") + line).encode())
            fh.flush()
            os.fsync(fh.fileno())

    def _lines(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        lines = []
        for raw in self.path.read_text().splitlines():
            try:
                entry = json.loads(raw)
            except json.JSONDecodeError:
                continue  # torn by a crash mid-write: that rung was never acted on
            if isinstance(entry, dict):
                lines.append(entry)
        return lines


def _finite_or_none(score: float) -> float | None:
    return float(score) if score == score and abs(score) != float("inf") else None


def _rung_of(line: Mapping[str, Any]) -> RungRecord:
    scores = {int(n): (float("nan") if s is None else float(s)) for n, s in dict(line.get("scores") or {}).items()}
    decisions = {
        int(n): Decision(Action(d["action"]), None if d.get("source") is None else int(d["source"]), dict(d["params"]))
        for n, d in dict(line.get("decisions") or {}).items()
    }
    return RungRecord(int(line["rung"]), scores, decisions)
