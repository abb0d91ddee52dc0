"""Population-based training, the mechanics: segments, checkpoint snapshots and copies, lineage.

:class:`Population` turns a member's finished segment into its next segment's
trial config (or ``None`` when the member is done), asking :class:`PBTPolicy`
what to do. It copies files inside the campaign folder only; the campaign
submits the configs.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainers.api import TrialConfig

from search.store.folder import CampaignFolder, replaced_atomically
from search.store.records import CONTROLLER_FILES, Attr
from search.pbt.policy import Action, Member, PBTPolicy, recorded_schedule

__all__ = ["Population", "SNAPSHOT"]

SNAPSHOT = "segment-"  # trials/<n>/segment-<epoch>/: the checkpoint as of that segment end
KEEP_SNAPSHOTS = 2  # per member: the rung it is at and the one before


class Population:
    """Every member's latest record, and the lineage of who copied whom when."""

    def __init__(self, policy: PBTPolicy, folder: CampaignFolder, metric: str, total_epochs: int) -> None:
        self.policy = policy
        self._folder = folder
        self._metric = metric
        self._total = total_epochs
        self.rungs: dict[int, dict[int, Member]] = {}  # epoch -> number -> the member's record there
        self.lineage: dict[int, list[dict[str, Any]]] = {}

    def first_segment(self, config: TrialConfig) -> TrialConfig:
        """A member's first config: train to the first segment end, schedule over the whole run."""
        epochs = min(self._total, self.policy.spec.interval)
        return dataclasses.replace(config, epochs=epochs, schedule_epochs=self._total, inherit_checkpoint=True)

    def next_segment(self, config: TrialConfig, metrics: Mapping[str, float]) -> TrialConfig | None:
        """The member's next config after a finished segment, or None when it has trained all epochs."""
        number, epoch = config.number, config.epochs
        score = float(metrics.get(self._metric, math.nan))
        if epoch >= self._total or not math.isfinite(score):
            return None
        self._snapshot(number, epoch)
        member = Member(number, epoch, score, dict(config.params))
        rung = self.rungs.setdefault(epoch, {})
        rung[number] = member
        decision = self.policy.decide(member, list(rung.values()))
        params = dict(config.params)
        if decision.action is Action.EXPLOIT and decision.source is not None:
            if self._copy_snapshot(decision.source, number, epoch):
                params = dict(decision.params)
                self.lineage.setdefault(number, []).append(
                    {"epoch": epoch, "source": decision.source, "params": dict(decision.params)}
                )
        return dataclasses.replace(config, params=params, epochs=min(self._total, epoch + self.policy.spec.interval))

    def _snapshot(self, number: int, epoch: int) -> None:
        trial = self._folder.trial(number)
        target = trial / f"{SNAPSHOT}{epoch}"
        target.mkdir(exist_ok=True)
        for path in _state_files(trial):
            _copy_atomic(path, target / path.name)
        old = sorted((p for p in trial.glob(f"{SNAPSHOT}*") if p.is_dir()), key=_snapshot_epoch)
        for stale in old[:-KEEP_SNAPSHOTS]:
            shutil.rmtree(stale, ignore_errors=True)

    def _copy_snapshot(self, source: int, number: int, epoch: int) -> bool:
        """Copy ``source``'s checkpoint at ``epoch`` over ``number``'s; False if it is gone."""
        files = _state_files(self._folder.trial(source) / f"{SNAPSHOT}{epoch}")
        for path in files:
            _copy_atomic(path, self._folder.trial(number) / path.name)
        return bool(files)

    def attributes(self, number: int, history: Sequence[tuple[int, Mapping[str, float]]]) -> dict[str, Any]:
        """What a finished member stores: its lineage and the LR schedule it actually followed."""
        return {Attr.PBT_LINEAGE: self.lineage.get(number, []), Attr.PBT_SCHEDULE: recorded_schedule(history)}


def _snapshot_epoch(path: Path) -> int:
    return int(path.name.removeprefix(SNAPSHOT))


def _state_files(folder: Path) -> list[Path]:
    """The trainer's state files in ``folder`` (not the controller's own records)."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name not in CONTROLLER_FILES)


def _copy_atomic(source: Path, target: Path) -> None:
    with replaced_atomically(target) as tmp:
        shutil.copyfile(source, tmp)
