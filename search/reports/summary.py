"""Tables of a study's trials (pandas): the best trials, the Pareto front, counts by state.

Only the campaign's own trials: warm-start copies (``search.session.warm_start``) inform its sampler and are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import optuna
from optuna.trial import FrozenTrial

from search.store.records import TrialRecord, state_name
from search.store.warm_marks import own_trials
from search.vocab.terms import maximizing
from spaces.errors import SpaceError
from spaces.params import SearchSpace

if TYPE_CHECKING:  # pandas loads for a table, not for ``hypersweep status``
    import pandas as pd

__all__ = [
    "device_columns",
    "trials_frame",
    "best_table",
    "best_trials",
    "best_notes",
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
    if record.config is not None and isinstance(record.config.get("params"), dict):
        return dict(record.config["params"])
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


def best_table(study: optuna.Study, metrics: tuple[str, ...], directions: tuple[str, ...], k: int = 5) -> pd.DataFrame:
    """The rows of :func:`best_trials`: the best ``k`` complete trials (single objective) or the Pareto front
    (several). Only those rows are built (at 100,000 trials the whole table takes seconds)."""
    import pandas as pd

    shown = best_trials(study, directions, k)
    if shown:
        return pd.DataFrame([_row(t, metrics) for t in shown])
    return trials_frame(study, metrics).iloc[0:0]  # none complete: the table's columns, no row


def best_trials(study: optuna.Study, directions: tuple[str, ...], k: int | None = 5) -> list[FrozenTrial]:
    """The campaign's best ``k`` (None: all) complete trials, only feasible ones where the study has constraints
    and some trial meets them (single objective), or its Pareto front (several), best first by the first
    objective; ties in trial order, as Optuna's ``best_trial`` (a stable sort keeps it under ``reverse`` too)."""
    done = [t for t in own_trials(study.get_trials(deepcopy=False)) if t.state == optuna.trial.TrialState.COMPLETE]
    if len(directions) > 1:
        front = {t.number for t in study.best_trials}
        return sorted((t for t in done if t.number in front), key=_first_value, reverse=maximizing(directions[0]))
    infeasible = _infeasible(study)
    feasible = [t for t in done if t.number not in infeasible]
    ranked = feasible if infeasible and feasible else done  # with [study] constraints, the best are feasible ones
    ordered = sorted(ranked, key=_first_value, reverse=maximizing(directions[0]))
    return ordered if k is None else ordered[:k]


def best_notes(study: optuna.Study, directions: tuple[str, ...], ranked: Sequence[FrozenTrial]) -> list[str]:
    """What a reader of ``ranked`` (:func:`best_trials`: the best, or the Pareto front) should know: how
    ``[study] constraints`` chose among the complete trials, and which trials tie with the best (one objective)."""
    notes = []
    done = {
        t.number for t in own_trials(study.get_trials(deepcopy=False)) if t.state == optuna.trial.TrialState.COMPLETE
    }
    infeasible = _infeasible(study) & done
    if infeasible:
        feasible = len(done) - len(infeasible)
        if feasible:
            notes.append(
                f"{feasible} of {len(done)} complete trial(s) meet the [study] constraints; only they are ranked"
            )
        elif len(directions) > 1:  # Optuna's front holds feasible trials only
            notes.append(
                f"no complete trial meets the [study] constraints yet ({len(done)} infeasible): no Pareto front"
            )
        else:
            notes.append(
                f"no complete trial meets the [study] constraints yet: the best of the {len(done)} infeasible one(s)"
            )
    if len(directions) > 1 or not ranked:
        return notes
    best = _first_value(ranked[0])
    tied = [t.number for t in ranked[1:] if _first_value(t) == best]
    if tied:
        who = f"trial {tied[0]} ties" if len(tied) == 1 else f"trials {', '.join(map(str, tied))} tie"
        notes.append(
            f"{who} with trial {ranked[0].number} at {best:.6g} (the lowest trial number counts as best, as in Optuna)"
        )
    return notes


def _first_value(trial: FrozenTrial) -> float:
    return float(trial.values[0])


def _infeasible(study: optuna.Study) -> set[int]:
    """Complete trials with a constraint value above 0 (Optuna's ``Trial.set_constraint``)."""
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    return {t.number for t in complete if any(float(v) > 0 for v in t.constraints.values())}


def state_counts(study: optuna.Study) -> dict[str, int]:
    counts: dict[str, int] = {}
    for trial in own_trials(study.get_trials(deepcopy=False)):
        name = state_name(trial)
        counts[name] = counts.get(name, 0) + 1
    return counts
