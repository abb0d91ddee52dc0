"""``hypersweep status``: what a campaign folder holds, read from its storage."""

from __future__ import annotations

import time
from pathlib import Path

import optuna
from optuna.trial import TrialState

from search.reports.cost_status import campaign_cost
from search.reports.summary import params_text, ranking, state_counts, trial_params
from search.spec.campaign_spec import load_spec
from search.store.failures import failure_groups, failures_block, rerun_note, retried_failures
from search.store.folder import CampaignFolder, ControllerLock
from search.store.journal_lines import first_unreadable_line, line_text, unreadable_last_line
from search.store.records import Attr, StudyAttr
from search.store.storage import missing_storage, open_storage, storage_url
from search.store.warm_marks import describe, own_trials
from spaces.errors import InputError
from spaces.params import SearchSpace

__all__ = ["status_text", "read_study"]


def _budget(grid: int, lr_grid: bool, count: int) -> str:
    """``7 of 9 trials`` (``grid``: the budget); a sweep's ``lr_grid`` widens past its grid: ``15 trials (9 in the
    lr grid, 6 widening it)``."""
    if not lr_grid or count <= grid:
        return f"{count} of {grid} trials"
    return f"{count} trials ({grid} in the lr grid, {count - grid} widening it)"


def status_text(path: str | Path) -> str:
    folder = CampaignFolder.existing(path)
    spec = load_spec(folder.spec, check_trainer=False)  # reading a campaign needs no trainer
    url = storage_url(spec.study.storage, folder)
    study = read_study(folder, spec.study.name, url)
    alive = ControllerLock.held(folder.lock)
    counts = state_counts(study)
    trials = own_trials(study.get_trials(deepcopy=False))
    rerun = len(retried_failures(trials))  # failures a later trial re-ran: out of the budget
    lines = [
        f"study {spec.study.name!r}: {_budget(spec.study.n_trials, bool(spec.scaling and spec.scaling.lr_grid), len(trials) - rerun)}, controller "
        + ("running" if alive else "not running"),
        "  " + ", ".join(f"{n} {state.lower()}" for state, n in sorted(counts.items())) + rerun_note(rerun)
        if counts
        else "  no trials yet",
    ]
    lines += journal_lines(url)
    lines += failures_block(failure_groups(study.get_trials(deepcopy=False)), folder.root, indent="  ")
    warm = describe(study)
    if warm:
        lines.append(f"  warm start: {warm['used']} trial(s) from {warm['source']} inform the sampler (not counted)")
    round_label = ""  # a sweep in rounds: the end expected is the running round's
    if spec.scaling is not None:  # the sweep's objective: steps to target, only over trials that reached it
        from search.scaling.lr_grid import round_label as sweep_round
        from search.scaling.outcomes import status_lines as sweep_status_lines  # with scipy: only for a sweep

        lines += sweep_status_lines(spec, trials)
        round_label = sweep_round(spec.scaling, trials)
    else:
        lines += _best_lines(study, spec.study.metrics, spec.study.directions, spec.space)
    running = [t for t in trials if t.state == TrialState.RUNNING]
    cost = campaign_cost(spec.study, spec.trainer, trials, study.user_attrs.get(StudyAttr.SLOTS))
    lines += cost.lines(round_label=round_label) if alive else cost.lines()[:1]  # an end only while a controller runs
    for trial in running:
        held = str(trial.user_attrs.get(Attr.HELD) or "")
        label = "running" if alive else f"held: {held}" if held else "interrupted (resume to finish it)"
        since = trial.datetime_start.strftime("%H:%M:%S") if trial.datetime_start else "?"
        steps = len(trial.intermediate_values)
        lines.append(
            f"  trial {trial.number}: {label}, since {since}, {steps} report(s), {width_text(trial)}, "
            f"params {params_text(trial_params(trial, spec.space))}"
        )
    if running and not alive:
        lines.append(f"  continue with: hypersweep resume {path}")
    return "\n".join(lines)


def width_text(trial: optuna.trial.FrozenTrial) -> str:
    """A running trial's width (its current config's ``data_parallel``) and, once it has several, its segment."""
    config = trial.user_attrs.get(Attr.CONFIG) or {}
    width = config.get("data_parallel", 1) if isinstance(config, dict) else 1
    segments = trial.user_attrs.get(Attr.SEGMENTS) or []
    text = f"width {width}"
    return f"{text} (segment {len(segments)}: {segments[-1]['transition']})" if segments else text


def read_study(folder: CampaignFolder, name: str, url: str) -> optuna.Study:
    """The campaign's study, read without writing anything (a missing storage is an error, never created)."""
    missing = missing_storage(url)
    if missing is not None:
        raise InputError(f"{folder.root}: the campaign has no storage yet ({missing} does not exist)")
    try:
        return optuna.load_study(study_name=name, storage=open_storage(url))
    except KeyError:
        raise InputError(
            f"{folder.root}: the storage holds no study {name!r} (was [study] name changed in spec.toml?)"
        ) from None
    except ValueError:  # a JSONDecodeError or UnicodeDecodeError from a journal line, which Optuna does not name
        found = first_unreadable_line(Path(url.removeprefix("journal:"))) if url.startswith("journal:") else None
        if found is None:
            raise
        raise InputError(
            f"{line_text(Path(url.removeprefix('journal:')), found)}: the study cannot be read past this line; "
            "restore the journal from a copy, or remove the line to read the rest"
        ) from None


def journal_lines(url: str) -> list[str]:
    """A line for a journal whose last line is unreadable (Optuna leaves it out without a word): which line."""
    if not url.startswith("journal:"):
        return []
    path = Path(url.removeprefix("journal:"))
    found = unreadable_last_line(path) if path.is_file() else None
    if found is None:
        return []
    return [f"  warning: {line_text(path, found)}: left out, so what it recorded is not shown"]


def _best_lines(
    study: optuna.Study, metrics: tuple[str, ...], directions: tuple[str, ...], space: SearchSpace | None = None
) -> list[str]:
    ranked, said = ranking(study, directions, k=1)  # own, feasible first: Optuna's best_trial raises without one
    notes = [f"  {note}" for note in said]
    if not ranked and not notes:  # no complete trial (a front is empty with some only while none is feasible)
        return ["  best: none yet"]
    if len(directions) > 1:
        return [f"  Pareto front: {len(ranked)} trial(s): {sorted(t.number for t in ranked)}", *notes]
    best = ranked[0]
    params = params_text(trial_params(best, space))
    return [f"  best {metrics[0]} = {best.value:.6g} (trial {best.number}), params {params}", *notes]


def _now() -> str:
    return time.strftime("%H:%M:%S")
