"""Each trial's state, ranking key and internal row for TPE refits of one search space, kept between refits.

A refit of :class:`~search.sampling.tpe.RefitTPESampler` split the study's trials into "below" and "above"
(:func:`~search.sampling.tpe_split.split_for_refit`, a walk over every trial and a sort of trial objects)
and then read each trial's row of internal values (a second walk). With 10,000 trials running, as at the
first completions of a campaign on 10,000 workers, that was half of a refit, and a refit came every 60 asks.

:class:`TrialTable` keeps what a refit needs in arrays indexed by trial number, and updates them from the
trials that can still change: the new ones, and the ones that were running or waiting (a finished trial's
state, values, parameters, intermediate values and constraints never change). The split is then a stable
sort of arrays, made exactly as Optuna's ``_split_trials`` makes it for one objective (tested trial for
trial): the complete trials by value, then the pruned ones by their last step and its value, then the
infeasible ones by how far they miss their constraints. A study of several objectives is not kept
(:meth:`TrialTable.update` answers False): Optuna ranks those by non-domination, and the walk does it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from itertools import compress
from operator import attrgetter, is_not, not_
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from search.compat import optuna_private as op

__all__ = ["LIVE", "TrialChanges", "TrialTable"]

_COMPLETE, _PRUNED, _INFEASIBLE, _RUNNING, _OUT = 0, 1, 2, 3, 4  # _OUT: failed or waiting, in no group
LIVE = (TrialState.RUNNING, TrialState.WAITING)  # the states a trial can leave
_state_of = attrgetter("state")


class TrialChanges:
    """Which trials of a study to read again: the new ones, and those read while running or waiting whose state
    has moved since (a finished trial never changes). Kept by :class:`TrialTable` and TPE's intersection."""

    def __init__(self) -> None:
        self.seen = 0  # trials 0 .. seen - 1 were read at least once
        self._live: list[int] = []  # of those, the running or waiting ones when last read ...
        self._state: list[TrialState] = []  # ... and that state

    def since(self, trials: Sequence[FrozenTrial]) -> list[int] | None:
        """The numbers to read, the moved ones first; None if the trials are not numbered by position (nothing
        is then recorded)."""
        n = len(trials)
        if n < self.seen or (n and trials[n - 1].number != n - 1):
            return None
        now = list(map(_state_of, map(trials.__getitem__, self._live)))
        moved = list(map(is_not, now, self._state))
        changed: list[int] = []
        if any(moved):
            changed = list(compress(self._live, moved))
            stay = list(map(not_, moved))
            self._live, self._state = list(compress(self._live, stay)), list(compress(now, stay))
        fresh = [*changed, *range(self.seen, n)]
        for number in fresh:
            state = trials[number].state
            if state in LIVE:
                self._live.append(number)
                self._state.append(state)
        self.seen = n
        return fresh


class TrialTable:
    """The trials of one study as one search space's refits read them (single objective)."""

    def __init__(
        self,
        search_space: dict[str, BaseDistribution],
        maximize: bool,
        params_of: Callable[[FrozenTrial], dict[str, Any]],
    ) -> None:
        self._space = search_space
        self._maximize = maximize
        self._params_of = params_of  # Optuna's parameters of a trial (a running one's proposal included)
        self._changes = TrialChanges()
        self._provisional: set[int] = set()  # open trials whose row is their sampler's proposal, not set values
        self._size = 0
        self.kind = np.empty(0, dtype=np.int8)
        self.keys = np.empty((0, 2))  # the ranking key within the trial's group (smaller ranks first)
        self.rows = np.empty((0, len(search_space)))
        self.has_row = np.empty(0, dtype=bool)  # the trial has every parameter of the space

    def update(self, trials: Sequence[FrozenTrial]) -> bool:
        """Read the trials that are new or could have changed; False if the table cannot follow this study (its
        trials are not numbered by position, or one has several objective values)."""
        for number in list(self._provisional):  # a proposal can change until the values are set
            if number < len(trials):
                self._set_row(trials[number], self._params_of(trials[number]))
        fresh = self._changes.since(trials)
        if fresh is None:
            return False
        self._grow(len(trials))
        return all(self._read(trials[number]) for number in fresh)

    def _read(self, trial: FrozenTrial) -> bool:
        number, state = trial.number, trial.state
        if state == TrialState.RUNNING:
            self.kind[number] = _RUNNING
        elif state in (TrialState.COMPLETE, TrialState.PRUNED):
            infeasibility = op.infeasible_score(trial)
            if infeasibility > 0:
                self.kind[number], self.keys[number] = _INFEASIBLE, (infeasibility, 0.0)
            elif state == TrialState.PRUNED:
                self.kind[number], self.keys[number] = _PRUNED, self._pruned_key(trial)
            elif trial.values is not None and len(trial.values) == 1:
                value = trial.values[0]
                self.kind[number], self.keys[number] = _COMPLETE, (-value if self._maximize else value, 0.0)
            else:
                return False
        else:
            self.kind[number] = _OUT
        self._set_row(trial, self._params_of(trial) if state in LIVE else trial.params)
        return True

    def _pruned_key(self, trial: FrozenTrial) -> tuple[float, float]:
        """Optuna's ``_get_pruned_trial_score``: the last step first (later ranks first), then its value."""
        if not trial.intermediate_values:
            return 1.0, 0.0
        step, value = max(trial.intermediate_values.items())
        if math.isnan(value):
            return -step, math.inf
        return -step, -value if self._maximize else value

    def _set_row(self, trial: FrozenTrial, params: dict[str, Any]) -> None:
        number = trial.number
        has = self._space.keys() <= params.keys()
        self.has_row[number] = has
        if has:
            self.rows[number] = [d.to_internal_repr(params[name]) for name, d in self._space.items()]
        if trial.state in LIVE and not self._space.keys() <= trial.params.keys():
            self._provisional.add(number)
        else:
            self._provisional.discard(number)

    def _grow(self, n: int) -> None:
        if n <= self._size:
            return
        size = max(n, 2 * self._size, 64)
        self.kind = np.resize(self.kind, size)
        self.keys = np.resize(self.keys, (size, 2))
        self.rows = np.resize(self.rows, (size, len(self._space)))
        self.has_row = np.resize(self.has_row, size)
        self._size = size

    def split(
        self, asking: int, liar: bool, gamma: Callable[[int], int]
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """The below and above groups' observations (each parameter's column of internal values, trials in number
        order) as Optuna's ``_split_trials`` and ``_get_internal_repr`` make them, trial ``asking`` left out."""
        seen = self._changes.seen
        kind = self.kind[:seen].copy()
        if 0 <= asking < seen:
            kind[asking] = _OUT
        groups = [np.flatnonzero(kind == k) for k in (_COMPLETE, _PRUNED, _INFEASIBLE)]
        n_below = gamma(sum(len(group) for group in groups))
        below = np.zeros(seen, dtype=bool)
        for group in groups:  # the complete trials first, then the pruned, then the infeasible
            take = min(n_below, len(group))
            if take:
                keys = self.keys[group]
                order = np.lexsort((keys[:, 1], keys[:, 0]))  # stable: ties keep the number order, as Optuna's sort
                below[group[order[:take]]] = True
            n_below -= take
        member = (kind <= _RUNNING if liar else kind < _RUNNING) & self.has_row[:seen]
        return self._columns(member & below), self._columns(member & ~below)

    def _columns(self, chosen: np.ndarray) -> dict[str, np.ndarray]:
        rows = self.rows[: self._changes.seen][chosen]
        return {name: rows[:, i] for i, name in enumerate(self._space)}
