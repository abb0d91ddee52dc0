"""Population-based training, the mechanics: rungs, checkpoint snapshots and copies, lineage.

A member that ends a segment at epoch ``e`` arrives at the rung at ``e``: its checkpoint
is snapshotted into ``trials/<n>/segment-<e>/`` (once; a snapshot never changes) and it
waits, holding no slot, until every member still in the population has arrived. Then the
whole rung is ranked at once (:meth:`PBTPolicy.decide_rung`), the decisions are written to
``pbt.jsonl`` (:class:`~search.pbt.journal.PBTJournal`) before anything is copied, the
exploiting members get their source's snapshot (the checkpoint only: a member's
``metrics.jsonl``, event file and ``stdout.log`` stay its own; ``stdout.log`` gets a line
saying what was copied), and every member's next segment is released.

After ``resume`` the journal gives each member the parameters and the segment it was in
(:meth:`Population.first_segment`), so nothing is decided twice and no learning rate reverts.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from search.pbt.journal import PBTJournal, RungRecord
from search.pbt.policy import Action, Member, PBTPolicy, recorded_schedule
from search.store.folder import CampaignFolder, replaced_atomically
from search.store.records import CONTROLLER_FILES, Attr
from search.vocab.terms import Transition
from trainers.api import TrialConfig

__all__ = ["Population", "Released", "SNAPSHOT", "lineage_of", "is_state_file"]

SNAPSHOT = "segment-"  # trials/<n>/segment-<epoch>/: the checkpoint as of that segment end
KEEP_SNAPSHOTS = 2  # per member: the rung it is at and the one before
NOT_STATE = frozenset({"stdout.log", "mlflow_run_id"})  # a member's own history, never copied


@dataclasses.dataclass(frozen=True)
class Released:
    """A member's next segment, released when its rung was decided (``source``: whom it copied)."""

    config: TrialConfig
    epoch: int
    source: int | None = None
    transition: Transition = Transition.CONTINUE  # exploit: it starts from ``source``'s checkpoint


class Population:
    """The rungs members have reached, the decided ones (from ``pbt.jsonl``), and who copied whom."""

    def __init__(
        self,
        policy: PBTPolicy,
        folder: CampaignFolder,
        metric: str,
        total_epochs: int,
        size: int,
        left: Callable[[], set[int]] = set,
    ) -> None:
        self.policy = policy
        self._folder = folder
        self._metric = metric
        self._total = total_epochs
        self._size = size  # the population: the campaign's n_trials
        self._left = left  # members that ended early (FAIL, PRUNED): no rung waits for them
        self.journal = PBTJournal(folder.root)
        self.decided: dict[int, RungRecord] = self.journal.rungs()
        self.arrived: dict[int, dict[int, Member]] = {}  # undecided rung -> number -> its record there
        self._configs: dict[int, TrialConfig] = {}  # a waiting member's last segment
        for record in self.decided.values():
            if not record.applied:  # killed between the decision and its copies: make them now
                self._apply(record)

    # --- segments --------------------------------------------------------------------------------

    def first_segment(self, config: TrialConfig) -> TrialConfig:
        """The segment a member starts with: its first, or (``resume``) the one after its last decided rung."""
        last = max((e for e, r in self.decided.items() if config.number in r.decisions), default=0)
        params = dict(self.decided[last].decisions[config.number].params) if last else dict(config.params)
        return dataclasses.replace(
            config, params=params, epochs=self._segment_end(last), schedule_epochs=self._total, inherit_checkpoint=True
        )

    def arrive(self, config: TrialConfig, metrics: Mapping[str, float]) -> bool:
        """A member ended a segment: True when it has trained all epochs, else it waits at its rung."""
        number, epoch = config.number, config.epochs
        if epoch >= self._total:
            return True
        reported = metrics.get("epoch")
        if reported is not None and int(reported) != epoch:
            raise RuntimeError(f"trial {number} ended its segment at epoch {reported:g}, not {epoch}")
        self._snapshot(number, epoch)
        self._configs[number] = config
        score = float(metrics.get(self._metric, math.nan))
        self.arrived.setdefault(epoch, {})[number] = Member(number, epoch, score, dict(config.params))
        return False

    def release(self) -> list[Released]:
        """The next segments of every member of each rung that is now complete (decided, copied, recorded)."""
        released: list[Released] = []
        left = self._left()
        for epoch in sorted(self.arrived):
            rung = {n: m for n, m in self.arrived[epoch].items() if n not in left}
            if len(rung) < self._size - len(left) or epoch in self.decided:
                continue
            decisions = self.policy.decide_rung(epoch, list(rung.values()))
            self.journal.decided(epoch, {n: m.score for n, m in rung.items()}, decisions)  # durable first
            record = RungRecord(epoch, {n: m.score for n, m in rung.items()}, decisions)
            self.decided[epoch] = record
            self._apply(record)
            del self.arrived[epoch]
            for number, decision in sorted(decisions.items()):
                config = dataclasses.replace(
                    self._configs.pop(number), params=dict(decision.params), epochs=self._segment_end(epoch)
                )
                released.append(Released(config, epoch, decision.source, decision.action))
        return released

    def waiting(self) -> set[int]:
        """Members waiting at an undecided rung."""
        return {n for rung in self.arrived.values() for n in rung}

    def _segment_end(self, epoch: int) -> int:
        return min(self._total, epoch + self.policy.spec.interval)

    # --- files -----------------------------------------------------------------------------------

    def _snapshot(self, number: int, epoch: int) -> None:
        """``trials/<n>/segment-<epoch>/``: the member's state files, once (never overwritten)."""
        trial = self._folder.trial(number)
        target = trial / f"{SNAPSHOT}{epoch}"
        if target.is_dir():
            return
        staging = trial / f".{SNAPSHOT}{epoch}.tmp-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        for path in _state_files(trial):
            shutil.copyfile(path, staging / path.name)
            _fsync(staging / path.name)
        os.replace(staging, target)

    def _apply(self, record: RungRecord) -> None:
        """Copy each exploiting member's source snapshot over its checkpoint (idempotent), then mark the rung done."""
        for number, decision in sorted(record.decisions.items()):
            if decision.action is not Action.EXPLOIT or decision.source is None:
                continue
            files = _state_files(self._folder.trial(decision.source) / f"{SNAPSHOT}{record.epoch}")
            if not files:
                raise RuntimeError(
                    f"trial {decision.source} has no snapshot at epoch {record.epoch} for trial {number} to copy"
                )
            for path in files:
                _copy_atomic(path, self._folder.trial(number) / path.name)
            _mark_log(self._folder.trial(number), record.epoch, decision.source, decision.params)
        self.journal.applied(record.epoch)
        for number in record.decisions:
            _prune_snapshots(self._folder.trial(number))

    # --- records ---------------------------------------------------------------------------------

    def lineage(self, number: int) -> list[dict[str, Any]]:
        return lineage_of(self.decided.values(), number)

    def attributes(self, number: int, history: Sequence[tuple[int, Mapping[str, float]]]) -> dict[str, Any]:
        """What a finished member stores: its lineage and the LR schedule it actually followed."""
        return {Attr.PBT_LINEAGE: self.lineage(number), Attr.PBT_SCHEDULE: recorded_schedule(history)}


def lineage_of(rungs: Sequence[RungRecord] | Any, number: int) -> list[dict[str, Any]]:
    """Whom member ``number`` copied at which epoch, with its parameters after each explore."""
    return [
        {"epoch": r.epoch, "source": d.source, "params": dict(d.params)}
        for r in sorted(rungs, key=lambda r: r.epoch)
        if (d := r.decisions.get(number)) is not None and d.action is Action.EXPLOIT
    ]


def _mark_log(trial: Path, epoch: int, source: int, params: Mapping[str, Any]) -> None:
    shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(params.items()))
    with open(trial / "stdout.log", "a", encoding="utf-8") as fh:
        fh.write(f"[hypersweep pbt] epoch {epoch}: exploit: copied trial {source}'s checkpoint; now {shown}\n")


def _prune_snapshots(trial: Path) -> None:
    old = sorted((p for p in trial.glob(f"{SNAPSHOT}*") if p.is_dir()), key=_snapshot_epoch)
    for stale in old[:-KEEP_SNAPSHOTS]:
        shutil.rmtree(stale, ignore_errors=True)


def _snapshot_epoch(path: Path) -> int:
    return int(path.name.removeprefix(SNAPSHOT))


def is_state_file(path: Path) -> bool:
    """A trainer's state file (its checkpoint): not the controller's records, the log or an event file."""
    name = path.name
    return not (name in CONTROLLER_FILES or name in NOT_STATE or name.startswith(("events.out.tfevents", ".")))


def _state_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and is_state_file(p))


def _copy_atomic(source: Path, target: Path) -> None:
    with replaced_atomically(target) as tmp:
        shutil.copyfile(source, tmp)
        _fsync(tmp)


def _fsync(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())
