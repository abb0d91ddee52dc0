"""``hypersweep status``: what a campaign folder holds, read from its storage."""

from __future__ import annotations

import time
from pathlib import Path

import optuna
from optuna.trial import TrialState

from search.store.folder import CampaignFolder, ControllerLock
from search.spec.campaign_spec import load_spec
from search.store.storage import open_storage, storage_url
from search.reports.summary import state_counts
from search.scaling.outcomes import status_lines as sweep_status_lines
from search.warm_start import describe, is_warm_start, own_trials

__all__ = ["status_text"]


def status_text(path: str | Path) -> str:
    folder = CampaignFolder(Path(path).resolve())
    if not folder.exists():
        raise FileNotFoundError(f"{folder.root} holds no campaign (no spec.toml)")
    spec = load_spec(folder.spec, check_trainer=False)  # reading a campaign needs no trainer
    study = optuna.load_study(study_name=spec.study.name, storage=open_storage(storage_url(spec.study.storage, folder)))
    alive = ControllerLock.held(folder.lock)
    counts = state_counts(study)
    trials = own_trials(study.get_trials(deepcopy=False))
    lines = [
        f"study {spec.study.name!r}: {len(trials)} of {spec.study.n_trials} trials, controller "
        + ("running" if alive else "not running"),
        "  " + ", ".join(f"{n} {state.lower()}" for state, n in sorted(counts.items())) if counts else "  no trials yet",
    ]
    warm = describe(study)
    if warm:
        lines.append(f"  warm start: {warm['used']} trial(s) from {warm['source']} inform the sampler (not counted)")
    if spec.scaling is not None:  # the sweep's objective: steps to target, only over trials that reached it
        lines += sweep_status_lines(spec, trials)
    else:
        lines += _best_lines(study, spec.study.metrics, spec.study.directions)
    running = [t for t in trials if t.state == TrialState.RUNNING]
    for trial in running:
        label = "running" if alive else "interrupted (resume to finish it)"
        since = trial.datetime_start.strftime("%H:%M:%S") if trial.datetime_start else "?"
        steps = len(trial.intermediate_values)
        lines.append(f"  trial {trial.number}: {label}, since {since}, {steps} report(s), params {trial.params}")
    if running and not alive:
        lines.append(f"  continue with: hypersweep resume {path}")
    return "\n".join(lines)


def _best_lines(study: optuna.Study, metrics: tuple[str, ...], directions: tuple[str, ...]) -> list[str]:
    complete = [t for t in own_trials(study.get_trials(deepcopy=False)) if t.state == TrialState.COMPLETE]
    if not complete:
        return ["  best: none yet"]
    if len(directions) > 1:
        front = own_trials(study.best_trials)
        return [f"  Pareto front: {len(front)} trial(s): {[t.number for t in front]}"]
    best = study.best_trial
    if is_warm_start(best):  # a warm-start copy: the best of the campaign's own trials instead
        best = (max if directions[0] == "maximize" else min)(complete, key=lambda t: t.value)
    return [f"  best {metrics[0]} = {best.value:.6g} (trial {best.number}), params {best.params}"]


def _now() -> str:
    return time.strftime("%H:%M:%S")
