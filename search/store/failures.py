"""Why trials failed, grouped by reason: the end-of-run summary's and ``status``'s failures block, the one line of
exit status 4, and the error :func:`search.run` raises where the command line exits 4.

A failure's reason is the exception class its worker recorded (``ValueError``, ``mypkg.errors.BadBatch``); a
failure that raised nothing (a missing or non-finite metric, a lost worker) or a record from before workers sent
the class goes by its whole reason. A failed trial that ``resume --retry-failed`` ran again (a later trial names it
in ``retry_of``) is no longer a failure of the campaign: it is left out, and out of the trial budget.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from optuna.trial import FrozenTrial, TrialState

from search.store.records import Attr, TrialRecord
from search.store.warm_marks import own_trials
from spaces.errors import EXIT_ALL_FAILED, HypersweepError

__all__ = [
    "FailureGroup",
    "failure_key",
    "failure_groups",
    "failures_block",
    "retried_failures",
    "open_failures",
    "rerun_note",
    "TrialsFailedError",
    "AllTrialsFailedError",
    "EarlyFailuresError",
    "shown_path",
    "kept_line",
    "all_failed_line",
    "all_failed_error",
    "MISSING_METRIC",
]

SHOWN_KINDS = 3  # reasons named one by one; the rest are counted together
MISSING_METRIC = "trainer did not return metric"  # how a failure the spec causes (a metric's name) begins


@dataclasses.dataclass(frozen=True)
class FailureGroup:
    """The failed trials that share one reason: how many, the first one's reason (one line), their numbers."""

    key: str
    first_line: str
    numbers: tuple[int, ...]

    @property
    def count(self) -> int:
        return len(self.numbers)


def failure_key(error_type: str, reason: str) -> str:
    """What failures are grouped by: the exception's class where the worker recorded it, else the whole reason."""
    return error_type or one_line(reason)


def one_line(reason: str) -> str:
    return " ".join((reason or "no reason recorded").split())


def retried_failures(trials: Iterable[FrozenTrial]) -> set[int]:
    """The numbers of the failed trials a later trial re-ran (``resume --retry-failed``)."""
    return {int(n) for t in trials if isinstance(n := t.user_attrs.get(Attr.RETRY_OF), int)}


def rerun_note(rerun: int) -> str:
    """`` (3 failed trials re-run, not counted)`` after a tally of trials by state; "" for none."""
    return f" ({rerun} failed trial{'s' if rerun != 1 else ''} re-run, not counted)" if rerun else ""


def open_failures(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """The campaign's own failed trials that no later trial re-ran."""
    own = own_trials(trials)
    retried = retried_failures(own)
    return [t for t in own if t.state == TrialState.FAIL and t.number not in retried]


def failure_groups(trials: Sequence[FrozenTrial]) -> list[FailureGroup]:
    """The open failures among ``trials`` by reason, the commonest first (ties: the earliest first)."""
    groups: dict[str, list[tuple[int, str]]] = {}
    for trial in open_failures(trials):
        record = TrialRecord.of(trial)
        groups.setdefault(failure_key(record.error_type, record.fail_reason), []).append(
            (trial.number, one_line(record.fail_reason))
        )
    made = [FailureGroup(key, found[0][1], tuple(n for n, _ in found)) for key, found in groups.items()]
    return sorted(made, key=lambda g: (-g.count, g.numbers[0]))


def failures_block(groups: Sequence[FailureGroup], root: Path, indent: str = "", kinds: int = SHOWN_KINDS) -> list[str]:
    """Lines that group failures by reason: ``failures (5): 4x ValueError: ... (open runs/x/trials/3/)``."""
    if not groups:
        return []
    total = sum(g.count for g in groups)
    lines = [f"{indent}failures ({total}), by reason:"]
    for group in groups[:kinds]:
        folder = shown_path(root / "trials" / str(group.numbers[0]))
        lines.append(f"{indent}  {group.count}x {_clip(group.first_line)} (trial {group.numbers[0]}: {folder}/)")
    rest = groups[kinds:]
    if rest:
        lines.append(f"{indent}  {sum(g.count for g in rest)}x other reasons ({len(rest)} kinds)")
    return lines


def groups_text(groups: Sequence[FailureGroup], kinds: int = SHOWN_KINDS) -> str:
    """``4x ValueError: ...; 1x metric 'score' is nan``: the commonest reasons first, one example each."""
    parts = [f"{g.count}x {_clip(g.first_line)}" for g in groups[:kinds]]
    if len(groups) > kinds:
        parts.append(f"{sum(g.count for g in groups[kinds:])}x other reasons")
    return "; ".join(parts)


def all_failed_line(trials: Sequence[FrozenTrial], kinds: int = SHOWN_KINDS) -> str:
    """One line when the campaign has trials and every one failed (``all 12 trials failed: 12x ValueError: ...``,
    the commonest reasons first, one example each), else "". Failures a later trial re-ran are left out."""
    retried = retried_failures(trials)
    own = [t for t in own_trials(trials) if t.number not in retried]
    if not own or any(t.state != TrialState.FAIL for t in own):
        return ""
    return f"all {len(own)} trial{'s' if len(own) != 1 else ''} failed: {groups_text(failure_groups(trials), kinds)}"


def all_failed_error(trials: Sequence[FrozenTrial], root: Path, spec_source: str = "") -> AllTrialsFailedError | None:
    """The error for exit status 4 when every one of the campaign's trials failed (its line: the reasons, where to
    look, the command that recovers), else None. ``spec_source``: the spec file the campaign was run from."""
    line = all_failed_line(trials)
    if not line:
        return None
    groups = failure_groups(trials)
    where = shown_path(root)
    if groups[0].first_line.startswith(MISSING_METRIC) and spec_source:
        fix = f"set [study] metric to one the trainer returns, then 'hypersweep run {spec_source} --overwrite'"
    else:
        fix = f"see {where}/trials/<n>/error.log; once fixed: 'hypersweep resume {where} --retry-failed'"
    return AllTrialsFailedError(f"{line}; {fix}", groups, root)


def shown_path(path: Path) -> str:
    """``path`` relative to here when it is below here, else as it is."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def kept_line(folder: Path) -> str:
    """The line for an interrupted campaign: its trials are kept, and the command that continues it."""
    return f"interrupted; running trials are kept: continue with 'hypersweep resume {shown_path(folder)}'"


def _clip(text: str, width: int = 120) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


class TrialsFailedError(HypersweepError):
    """The campaign's trials failed with nothing to show for it (exit status 4); ``groups``: the failures by
    reason, ``folder``: the campaign folder."""

    exit_code = EXIT_ALL_FAILED

    def __init__(self, message: str, groups: Sequence[FailureGroup] = (), folder: Path | None = None) -> None:
        super().__init__(message)
        self.groups = tuple(groups)
        self.folder = folder


class AllTrialsFailedError(TrialsFailedError):
    """The campaign ran to its end and every one of its trials failed."""


class EarlyFailuresError(TrialsFailedError):
    """The campaign stopped early: its first trials all failed for one reason (``[study] fail_fast``) and none
    completed; the rest of the budget is untouched and the trials in flight are kept for ``resume``."""
