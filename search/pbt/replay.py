"""Replaying a PBT member for ``hypersweep reproduce``: its whole schedule, with the checkpoints it inherited.

A member's record is a chain of stints: from scratch to its first exploit, then from each
source's checkpoint at the exploit epoch, with the parameters explored there, to the next.
A source's checkpoint at epoch ``e`` is itself replayed the same way (its own stints up to
``e``), so the chain is rebuilt from scratch in a temporary folder, from ``pbt.jsonl`` and
each member's recorded seed and config. A stint runs in one call of the trainer: a run
resumed from a checkpoint ends bit for bit as one never interrupted, so the segment
boundaries without an exploit need no stop, except where the member's width changed
(``[elastic] grow = "pbt"``, a retry narrowed to the workers left): a stint runs in pieces, each
at the width the member's recorded ``segments`` give it (the source's own, for the epochs a
source's checkpoint covers), each piece going on from the one before's checkpoint, as the
campaign's wider segment went on from the narrower one's. A report sent again by a piece that
resumed its own checkpoint is kept once, as the controller keeps it. Only the member's own
stints' reports are compared with its record.

What cannot be replayed raises :class:`NotReplayable` (``hypersweep reproduce`` exits 2
with its one line): a member that did not train all its epochs, a campaign without
``pbt.jsonl``, a source without a recorded config.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from search.pbt.journal import PBTJournal, RungRecord
from search.pbt.policy import Action
from search.pbt.population import is_state_file
from search.spec.campaign_spec import DATA_PARALLEL, CampaignSpec
from search.store.folder import CampaignFolder
from search.store.records import Attr
from spaces.errors import InputError
from trainers.api import RecordingReporter, TrialConfig

__all__ = ["NotReplayable", "Stint", "stints_of", "pieces", "widths_of", "replay_member"]

Reports = list[tuple[int, dict[str, float]]]
Fit = Callable[[TrialConfig, RecordingReporter], Mapping[str, float]]


class NotReplayable(InputError):
    """A PBT member whose record cannot be replayed (one line; exit status 2)."""


@dataclasses.dataclass(frozen=True)
class Stint:
    """Member ``number`` training from ``start`` to ``end`` with ``params``, from ``source``'s state at ``start``."""

    number: int
    start: int
    end: int
    params: dict[str, Any]
    source: int | None = None  # None: from scratch (start 0)


def stints_of(number: int, end: int, rungs: Mapping[int, RungRecord], initial: Mapping[str, Any]) -> list[Stint]:
    """Member ``number``'s stints up to epoch ``end``: split at each exploit before ``end``."""
    exploits = [
        (e, r.decisions[number])
        for e, r in sorted(rungs.items())
        if e < end and number in r.decisions and r.decisions[number].action is Action.EXPLOIT
    ]
    stints, start, params, source = [], 0, dict(initial), None
    for epoch, decision in exploits:
        stints.append(Stint(number, start, epoch, params, source))
        start, params, source = epoch, dict(decision.params), decision.source
    stints.append(Stint(number, start, end, params, source))
    return stints


def widths_of(trial: optuna.trial.FrozenTrial, width: int) -> list[tuple[int, int]]:
    """``(start epoch, width)`` of each segment the member's record holds, in order (none: ``width`` from 0)."""
    records = sorted(trial.user_attrs.get(Attr.SEGMENTS) or (), key=lambda r: int(r["index"]))  # Segment records
    return [(int(r["start_epoch"]), int(r["width"])) for r in records] or [(0, width)]


def pieces(stint: Stint, widths: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """``stint`` split where the member's width changed: ``(end epoch, width)`` of each piece. The width of the
    epoch after ``e`` is that of the last segment begun at ``e`` or before (a later one supersedes a cut one)."""

    def at(epoch: int) -> int:
        begun = [w for start, w in widths if start <= epoch]
        return begun[-1] if begun else widths[0][1]

    out: list[tuple[int, int]] = []
    for epoch in range(stint.start, stint.end):
        if out and out[-1][1] == at(epoch):
            out[-1] = (epoch + 1, out[-1][1])
        else:
            out.append((epoch + 1, at(epoch)))
    return out


class _Replay:
    """Builds members' states at given epochs in a scratch folder, each once."""

    def __init__(
        self,
        spec: CampaignSpec,
        trials: dict[int, optuna.trial.FrozenTrial],
        rungs: dict[int, RungRecord],
        fit: Fit,
        work: Path,
    ) -> None:
        self._spec = spec
        self._trials = trials
        self._rungs = rungs
        self._fit = fit
        self._work = work
        self._states: dict[tuple[int, int], Path] = {}
        self.ran: list[tuple[int, int, int, int]] = []  # each piece run: (member, start epoch, end epoch, width)

    def member(self, number: int) -> tuple[Reports, dict[str, float]]:
        """Every report of member ``number``'s own stints, and its final metrics."""
        reports: Reports = []
        final: dict[str, float] = {}
        for stint in stints_of(number, self._spec.trainer.epochs, self._rungs, self._initial(number)):
            own, final, _folder = self._run(stint)
            reports += own
        return reports, final

    def state(self, number: int, epoch: int) -> Path:
        """A folder holding member ``number``'s checkpoint as of epoch ``epoch``."""
        if (number, epoch) not in self._states:
            last = stints_of(number, epoch, self._rungs, self._initial(number))[-1]
            _own, _final, folder = self._run(last)
            self._states[(number, epoch)] = folder
        return self._states[(number, epoch)]

    def _run(self, stint: Stint) -> tuple[Reports, dict[str, float], Path]:
        folder = Path(tempfile.mkdtemp(prefix=f"trial{stint.number}-{stint.start}-{stint.end}-", dir=self._work))
        if stint.source is not None:
            for path in self.state(stint.source, stint.start).iterdir():
                if path.is_file() and is_state_file(path):
                    shutil.copyfile(path, folder / path.name)
        config = self._config(stint.number)
        reports: Reports = []
        final: Mapping[str, float] = {}
        start = stint.start
        for end, width in pieces(stint, widths_of(self._trials[stint.number], config.data_parallel)):
            self.ran.append((stint.number, start, end, width))
            start = end
            piece = dataclasses.replace(
                config,
                params=dict(stint.params),
                data_parallel=width,
                epochs=end,
                schedule_epochs=self._spec.trainer.epochs,
                inherit_checkpoint=True,
                checkpoint_dir=str(folder),
                log_dir=None,
            )
            reporter = RecordingReporter()
            final = self._fit(piece, reporter)
            seen = {step for step, _m in reports}
            reports += [(step, metrics) for step, metrics in reporter.reports if step not in seen]
        return reports, {str(k): float(v) for k, v in dict(final).items()}, folder

    def _config(self, number: int) -> TrialConfig:
        frozen = self._trials.get(number)
        recorded = None if frozen is None else frozen.user_attrs.get(Attr.CONFIG)
        if not isinstance(recorded, dict):
            raise NotReplayable(f"trial {number}, whose checkpoint the chain inherits, has no recorded config")
        config = dict(recorded)
        config.pop("devices", None)
        return TrialConfig.from_dict(config)

    def _initial(self, number: int) -> dict[str, Any]:
        """The parameters member ``number`` was sampled with (its first segment's)."""
        params = self._spec.space.complete(self._trials[number].params)
        params.pop(DATA_PARALLEL, None)
        return params


def replay_member(
    spec: CampaignSpec,
    study: optuna.Study,
    folder: CampaignFolder,
    number: int,
    fit: Fit,
    notes: list[str] | None = None,
) -> tuple[Reports, dict[str, float], str]:
    """Replay member ``number``'s whole schedule: (its own reports, its final metrics, an error or ""). Where its
    width changed, ``notes`` gets a line: the widths its epochs were replayed at."""
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    trial = trials[number]
    if trial.state != TrialState.COMPLETE:
        raise NotReplayable(
            f"trial {number} is a PBT member that did not train all {spec.trainer.epochs} epochs "
            f"({trial.state.name}): its schedule has no recorded end to replay"
        )
    journal = PBTJournal(folder.root)
    if not journal.path.exists():
        raise NotReplayable(
            f"{folder.root} has no {journal.path.name}: the population's decisions were not "
            "recorded, so the member's schedule cannot be replayed"
        )
    with tempfile.TemporaryDirectory(prefix="hypersweep-pbt-replay-") as work:
        replay = _Replay(spec, trials, journal.rungs(), fit, Path(work))
        try:
            reports, final = replay.member(number)
        except NotReplayable:
            raise
        except Exception as exc:  # noqa: BLE001 - a trainer that now fails is a mismatch, shown as one line
            return [], {}, f"the trainer raised {type(exc).__name__}: {exc}"
    own = [(start, end, width) for member, start, end, width in replay.ran if member == number]
    if notes is not None and len({width for _s, _e, width in own}) > 1:
        shown = ", ".join(f"{start}..{end} at {width}" for start, end, width in own)
        notes.append(f"replayed its epochs at the widths it ran them at (epochs at slots): {shown}")
    return reports, final, ""
