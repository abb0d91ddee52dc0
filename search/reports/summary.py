"""Tables of a study's trials (pandas): the best trials, the Pareto front, counts by state.

Only the campaign's own trials: warm-start copies (``search.session.warm_start``) inform its sampler and are left out.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import TYPE_CHECKING

import optuna
from optuna.trial import FrozenTrial

from search.store.records import TrialRecord, state_name
from search.store.warm_marks import own_trials
from search.vocab.terms import feasible, maximizing
from spaces.errors import SpaceError
from spaces.params import SearchSpace

if TYPE_CHECKING:  # pandas loads for a table, not for ``hypersweep status``
    import pandas as pd

__all__ = [
    "device_columns",
    "trials_frame",
    "best_table",
    "best_trials",
    "ranking",
    "state_counts",
    "trial_params",
    "params_text",
]


def _row(trial: FrozenTrial | TrialRecord, metrics: tuple[str, ...]) -> dict:
    record = TrialRecord.of(trial)
    row: dict = {"number": record.number, "state": record.state_name}
    values = record.values or ()
    for i, name in enumerate(metrics):
        row[name] = values[i] if i < len(values) else None
    row["duration_s"] = record.duration
    row.update(device_columns(record))
    row.update({f"params.{k}": v for k, v in trial_params(record).items()})
    row["reason"] = record.reason
    return row


def _with_constraints(row: dict, trial: FrozenTrial, metrics: tuple[str, ...]) -> dict:
    """``row`` with the trial's ``[study] constraints`` values after its objective(s) (<= 0: feasible)."""
    if not trial.constraints:
        return row
    keys = list(row)
    at = keys.index(metrics[-1]) + 1
    extra = {name: float(value) for name, value in trial.constraints.items()}
    return {**{k: row[k] for k in keys[:at]}, **extra, **{k: row[k] for k in keys[at:] if k not in extra}}


def device_columns(record: TrialRecord) -> dict:
    """Peak memory (MiB; CUDA's, else the host's RSS), what measured it, the GPU share, GPU utilization (%)
    and the out-of-memory re-runs, where the trial recorded them."""
    metrics = record.metrics or {}
    return {
        "peak_memory_mib": None if record.peak_memory is None else round(record.peak_memory / 2**20, 1),
        "memory_kind": record.memory_kind or None,
        "gpu_share": record.gpu_share,
        "gpu_utilization": record.gpu_utilization,
        "oom_retries": int(metrics["oom_retries"]) if "oom_retries" in metrics else None,
    }


def trial_params(trial: FrozenTrial | TrialRecord, space: SearchSpace | None = None) -> dict:
    """The parameters as the trainer got them, each architecture as its one canonical genome string.

    This is the one form ``status``, ``run``'s table and the report show. A trial that recorded
    no config (asked, not yet started) has only Optuna's flat ``arch.*`` parameters: with the
    ``space``, each genome's flat parameters are folded back into its string.
    """
    record = TrialRecord.of(trial)
    configured = record.config.get("params") if record.config is not None else None
    if isinstance(configured, dict) and (configured or not record.params):  # empty: an objective's, suggested later
        return dict(configured)
    return _fold_genomes(dict(record.params), space) if space is not None else dict(record.params)


def _fold_genomes(params: dict, space: SearchSpace) -> dict:
    for param in space:  # an architecture is searched through flat parameters '<name>.*'
        flat = [name for name in params if name.startswith(f"{param.name}.")]
        if not flat or param.name in params:
            continue
        try:
            text = param.value_from(params)
        except SpaceError:  # cut short (a crash between its parameters): left as it is
            continue
        at = list(params).index(flat[0])
        items = [(k, v) for k, v in params.items() if k not in flat]
        params = dict([*items[:at], (param.name, text), *items[at:]])
    return params


def params_text(params: dict) -> str:
    """``name=value`` pairs, as one line (an architecture's string as it is)."""
    return ", ".join(f"{k}={v}" for k, v in params.items())


def trials_frame(
    study: optuna.Study, metrics: tuple[str, ...], records: Sequence[TrialRecord] | None = None
) -> pd.DataFrame:
    """One row per trial, with values named by the study's metrics (``records``: the study's own trials' records,
    where the caller has them already)."""
    import pandas as pd

    trials = records if records is not None else own_trials(study.get_trials(deepcopy=False))
    return pd.DataFrame([_row(t, metrics) for t in trials])


def best_table(
    study: optuna.Study,
    metrics: tuple[str, ...],
    directions: tuple[str, ...],
    k: int = 5,
    shown: Sequence[FrozenTrial] | None = None,
) -> pd.DataFrame:
    """The rows of :func:`best_trials`: the best ``k`` complete trials (single objective) or the Pareto front
    (several), or of the trials ``shown``. Only those rows are built (at 100,000 trials the whole table takes
    seconds)."""
    import pandas as pd

    shown = best_trials(study, directions, k) if shown is None else shown
    if shown:
        return pd.DataFrame([_with_constraints(_row(t, metrics), t, metrics) for t in shown])
    return trials_frame(study, metrics).iloc[0:0]  # none complete: the table's columns, no row


def best_trials(study: optuna.Study, directions: tuple[str, ...], k: int | None = 5) -> list[FrozenTrial]:
    """The campaign's best ``k`` (None: all) complete trials, only feasible ones where the study has constraints
    and some trial meets them (single objective), or its Pareto front (several), best first by the first
    objective; ties in trial order, as Optuna's ``best_trial``."""
    return ranking(study, directions, k)[0]


def ranking(study: optuna.Study, directions: tuple[str, ...], k: int | None = 5) -> tuple[list[FrozenTrial], list[str]]:
    """:func:`best_trials`, and what a reader of them should know: how ``[study] constraints`` chose among the
    complete trials, and which trials tie with the best (one objective). One pass over the trials."""
    done = [t for t in own_trials(study.get_trials(deepcopy=False)) if t.state == optuna.trial.TrialState.COMPLETE]
    meeting = [t for t in done if feasible(t.constraints)]
    notes = _constraint_notes(len(done), len(done) - len(meeting), several=len(directions) > 1)
    if len(directions) > 1:
        front = {t.number for t in study.best_trials}
        return sorted(
            (t for t in done if t.number in front), key=_first_value, reverse=maximizing(directions[0])
        ), notes
    pool = meeting or done  # with [study] constraints, the best are feasible ones while there are any
    sign = -1.0 if maximizing(directions[0]) else 1.0
    key = lambda t: sign * _first_value(t)  # noqa: E731  (stable: ties keep trial order)
    ranked = sorted(pool, key=key) if k is None else heapq.nsmallest(k, pool, key=key)
    if ranked:
        best = ranked[0]
        value = best.values[0]
        tied = [t.number for t in pool if t.values[0] == value and t is not best]
        notes += _tie_notes(best, tied)
    return ranked, notes


def _constraint_notes(done: int, infeasible: int, several: bool) -> list[str]:
    if not infeasible:
        return []
    if infeasible < done:
        return [f"{done - infeasible} of {done} complete trial(s) meet the [study] constraints; only they are ranked"]
    if several:  # Optuna's front holds feasible trials only
        return [f"no complete trial meets the [study] constraints yet ({done} infeasible): no Pareto front"]
    return [f"no complete trial meets the [study] constraints yet: the best of the {done} infeasible one(s)"]


def _tie_notes(best: FrozenTrial, tied: Sequence[int], shown: int = 10) -> list[str]:
    if not tied:
        return []
    numbers = ", ".join(map(str, tied[:shown])) + (f" and {len(tied) - shown} more" if len(tied) > shown else "")
    who = f"trial {numbers} ties" if len(tied) == 1 else f"trials {numbers} tie"
    return [
        f"{who} with trial {best.number} at {_first_value(best):.6g} "
        "(the lowest trial number counts as best, as in Optuna)"
    ]


def _first_value(trial: FrozenTrial) -> float:
    return float(trial.values[0])


def state_counts(study: optuna.Study) -> dict[str, int]:
    counts: dict[str, int] = {}
    for trial in own_trials(study.get_trials(deepcopy=False)):
        name = state_name(trial)
        counts[name] = counts.get(name, 0) + 1
    return counts
