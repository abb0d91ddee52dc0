"""A scaling sweep's ``[scaling.branching]`` study, run as a campaign after the sweep, on the sweep's cluster.

The study (:func:`search.scaling.branch_run.run_branching`: the reference run in segments, its branches, the
scheduled run and the fixed run at the schedule's last batch) hands its runs over in groups; each group here
becomes trials of a study of its own, ``<name>-branching``, in the campaign folder ``branching/`` (its own
storage, ``trials/<n>/`` logs and records). A trial is enqueued with the config it runs as given
(``preset_config``, :mod:`search.loop.trial_maker`) and a key naming that run (its checkpoint folder, epochs,
parameters); a round of the campaign loop then runs the group like any trials: a lost worker's trial is retried
from its checkpoint, each is recorded. A resumed sweep runs the study again from the start: a run whose key
already has a finished trial is not run again (its reports come from its record), so it carries on where it
stopped. Results: ``branching/branches.csv``, ``critical.csv``, ``summary.json`` and ``critical.png``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from search.loop.campaign import Campaign, CampaignError
from search.loop.progress import Progress
from search.scaling.branch_run import BranchingResult, Reports, Submit, run_branching, write_branching
from search.spec.branching import BranchingSpec
from search.spec.campaign_spec import CampaignSpec, StudySpec, TrainerSpec
from search.store.folder import CampaignFolder
from search.store.records import Attr, TrialRecord
from spaces.params import SearchSpace
from trainers.api import TrialConfig

__all__ = ["BRANCH_KEY", "branching_spec", "reference_config", "CampaignSubmit", "run_branching_study"]

BRANCH_KEY = "branch_key"  # a trial's user attribute: which run of the study it is (resume finds it by this)
SUFFIX = "-branching"  # the study's name: the sweep's and this

Load = Callable[[CampaignSpec, CampaignFolder, bool], optuna.Study]  # runner.load_study (spec, folder, create)
Executor = Callable[[str], Any]  # a new executor for a round, given its name


def branching_spec(spec: CampaignSpec) -> CampaignSpec:
    """The study's campaign spec: the sweep's cluster and trainer, trials that minimise ``val_loss`` (what a
    branch is judged by), a random sampler without the sweep's options, no pruning, no sweep, no early stop on
    failures; its trials carry their configs, so its space is empty."""
    study = dataclasses.replace(
        spec.study,
        name=spec.study.name + SUFFIX,
        metrics=("val_loss",),
        directions=("minimize",),
        sampler="random",
        pruner="none",
        n_trials=0,
        time_budget=0.0,
        warm_start="",
        constraints=(),
        fail_fast=0,  # a diverged branch is a finding (its loss is NaN), not a reason to stop
    )
    return dataclasses.replace(
        spec, study=study, space=SearchSpace(()), scaling=None, enqueue=(), elastic=None, pbt=None, sampler_options={}
    )


def reference_config(
    fixed: Mapping[str, Any], study: StudySpec, trainer: TrainerSpec, branching: BranchingSpec
) -> TrialConfig:
    """The reference run's config: ``[space]``'s constants (``fixed``), the reference batch at ``lr`` (no scaling
    rule), the study seed, a checkpoint every epoch (the points keep theirs)."""
    assert branching.lr is not None
    params = {**fixed, "batch_size": branching.reference_batch, "lr": branching.lr}
    params["lr_scaling"] = "none"
    return TrialConfig(
        study=study.name + SUFFIX,
        number=0,
        params=params,
        seed=study.seed,
        epochs=branching.epochs,
        dataset=trainer.dataset,
        device=trainer.device,
        checkpoint_every=1,
        deterministic=study.deterministic,
        options=dict(trainer.options),
    )


def run_key(config: TrialConfig, root: Path) -> str:
    """Which run ``config`` is: its checkpoint folder (relative to the study's), epochs and parameters."""
    folder = Path(config.checkpoint_dir or "")
    where = str(folder.relative_to(root)) if folder.is_relative_to(root) else str(folder)
    what = {"folder": where, "epochs": config.epochs, "params": config.params, "base": config.base_params}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


class CampaignSubmit:
    """A :data:`~search.scaling.branch_run.Submit` that runs each group of configs as trials of ``study``, one
    round of the campaign loop per group that has runs left (see the module's docstring)."""

    def __init__(
        self, spec: CampaignSpec, folder: CampaignFolder, study: optuna.Study, executor: Executor, progress: Progress
    ) -> None:
        self._spec, self._folder, self._study = spec, folder, study
        self._executor, self._progress = executor, progress

    def __call__(self, configs: Sequence[TrialConfig]) -> list[Reports]:
        keys = [run_key(c, self._folder.root) for c in configs]
        known = self._by_key()
        for config, key in zip(configs, keys):
            if key not in known:
                self._study.enqueue_trial({}, user_attrs={Attr.PRESET: config.to_dict(), BRANCH_KEY: key})
                known[key] = None
        if any(t is None or not t.state.is_finished() for t in (known[k] for k in keys)):
            self._round()
        ran = self._by_key()
        return [_reports(ran[k]) for k in keys]

    def _by_key(self) -> dict[str, FrozenTrial | None]:
        """Each run's latest trial, by key."""
        return {
            t.user_attrs[BRANCH_KEY]: t for t in self._study.get_trials(deepcopy=False) if BRANCH_KEY in t.user_attrs
        }

    def _round(self) -> None:
        total = len(self._study.get_trials(deepcopy=False))
        spec = dataclasses.replace(self._spec, study=dataclasses.replace(self._spec.study, n_trials=total))
        executor = self._executor(f"hypersweep-{spec.study.name}-{uuid.uuid4().hex[:8]}")
        self._progress.in_round("this branching round")  # its expected end is this group's, not the study's
        campaign = Campaign(
            spec,
            self._folder,
            self._study,
            executor,
            on_progress=self._progress,
            on_notice=self._progress.note,
            sampling="inline",
        )
        campaign.run()
        left = [t.number for t in self._study.get_trials(deepcopy=False) if not t.state.is_finished()]
        if left:
            raise CampaignError(
                f"the branching study stopped with trials {left} unfinished; "
                f"'hypersweep resume {self._folder.root.parent}' continues it"
            )


def _reports(trial: FrozenTrial | None) -> Reports:
    """A finished run's reports, from its record (``[]``: it failed before reporting)."""
    if trial is None:
        return []
    if trial.state == TrialState.FAIL and not trial.user_attrs.get(Attr.HISTORY):
        reason = trial.user_attrs.get(Attr.FAIL_REASON, "no reason recorded")
        raise CampaignError(f"branching trial {trial.number} failed before its first report: {reason}")
    return [(step, dict(metrics)) for step, metrics in TrialRecord.of(trial).history]


def run_branching_study(
    spec: CampaignSpec, folder: CampaignFolder, load: Load, executor: Executor, progress: Progress
) -> BranchingResult:
    """Run (or carry on) the sweep's branching study in ``folder/branching``; write its results there."""
    assert spec.scaling is not None and spec.scaling.branching is not None
    branching = spec.scaling.branching
    sub = CampaignFolder(folder.branching)
    bspec = branching_spec(spec)
    create = not sub.exists()
    if create:
        sub.create(bspec.text)
    study = load(bspec, sub, create)
    metric, direction = spec.study.metrics[0], spec.study.directions[0]
    target = (metric, spec.scaling.target, "max" if direction == "maximize" else "min")
    submit: Submit = CampaignSubmit(bspec, sub, study, executor, progress)
    reference = reference_config(spec.space.fixed(), spec.study, spec.trainer, branching)
    result = run_branching(branching, reference, sub.root, submit, target=target)
    write_branching(result, branching, sub.root)
    from search.scaling.branch_plot import plot_critical

    plot_critical(result, sub.root / "critical.png")
    return result
