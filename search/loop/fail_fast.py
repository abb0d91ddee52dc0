"""Stop a campaign whose first trials all fail the same way (``[study] fail_fast``), instead of spending its budget.

The ledger tells :class:`FailFast` every trial it tells; once ``threshold`` trials of this run have failed for one
reason (:func:`~search.store.failures.failure_key`) while none has completed or been pruned, it is tripped, and the
campaign stops with :class:`~search.store.failures.EarlyFailuresError`: one line with the reason and the fix.
"""

from __future__ import annotations

from pathlib import Path

from optuna.trial import TrialState

from search.store.failures import EarlyFailuresError, FailureGroup, failure_key, one_line, shown_path

__all__ = ["FailFast", "early_failures_error"]


class FailFast:
    """Counts this run's failures by reason until a trial completes or is pruned (``threshold`` 0: never trips)."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self._armed = threshold > 0
        self._groups: dict[str, list[tuple[int, str]]] = {}
        self.tripped: FailureGroup | None = None
        self.spec_fault = False  # the tripping reason is the spec's: it names a metric the trainer does not return

    def told(
        self, number: int, state: TrialState, error_type: str = "", reason: str = "", spec_fault: bool = False
    ) -> None:
        """Trial ``number`` was told ``state`` (a failure: with its exception class and reason)."""
        if not self._armed:
            return
        if state != TrialState.FAIL:
            self._armed = False  # the trainer works: later failures are the trials' own
            return
        found = self._groups.setdefault(failure_key(error_type, reason), [])
        found.append((number, one_line(reason)))
        if len(found) >= self.threshold and self.tripped is None:
            self.tripped = FailureGroup(failure_key(error_type, reason), found[0][1], tuple(n for n, _ in found))
            self.spec_fault = spec_fault


def early_failures_error(
    fail_fast: FailFast, root: Path, spec_source: str, not_started: int, in_flight: int
) -> EarlyFailuresError:
    """The error that stops the campaign, its message one line: what failed, what was kept, how to go on."""
    group = fail_fast.tripped
    assert group is not None
    folder = shown_path(root)
    spent = f"{not_started} trial(s) of the budget not started" + (
        f", {in_flight} in flight kept for resume" if in_flight else ""
    )
    if fail_fast.spec_fault:
        fix = (
            f"set [study] metric to one the trainer returns (declaring reported_metrics lets 'hypersweep check' "
            f"see it), then 'hypersweep run {spec_source} --overwrite'"
        )
    else:
        first = group.numbers[0]
        fix = f"fix it (trial {first}: {folder}/trials/{first}/error.log), then 'hypersweep resume {folder} --retry-failed'"
    message = (
        f"stopped early: {group.count} trials failed the same way before any completed "
        f"([study] fail_fast = {fail_fast.threshold}): {group.first_line}; {spent}; {fix}"
    )
    return EarlyFailuresError(message, [group], root)
