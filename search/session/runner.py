"""Set a campaign up and tear it down: folder, lock, storage, study, cluster, then the loop.

``run_campaign`` starts a new campaign from a spec; ``resume_campaign`` continues
one from its folder (the frozen spec and the storage), re-running trials a dead
controller left RUNNING under their own numbers and parameters. A resumed campaign
samples with a new sampler seeded from the study seed and the number of trials in the
storage (``search.loop.sampler_factory.campaign_sampler``), never with a saved one: a saved sampler
lags behind the trials asked ahead of it, and would sample them again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import sys
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna

from cluster import ClusterError, ClusterOptions, open_cluster, way_out
from search.compat import optuna_private as op
from search.sampling import components
from search.sampling.pruning import install_pruner
from search.session.lifecycle import (
    NewStudy,
    check_environment_record,
    check_new,
    enqueue_failed,
    failed_to_retry,
    nothing_left,
    read_resumed_study,
    record_spec_changes,
    remove_campaign,
    spec_to_resume,
)
from search.session.options import RunOptions  # noqa: F401 - re-exported
from search.session.preflight import cluster_for
from search.spec.campaign_spec import CampaignSpec, StudySpec, load_spec
from search.spec.changes import SPEC_TEXT
from search.spec.gpu import gpu_packing
from search.store.environment import capture_environment, record_environment, scheduler_info
from search.store.failures import kept_line
from search.store.folder import CampaignFolder, ControllerLock
from search.store.records import StudyAttr
from search.store.storage import final_snapshot, open_storage, storage_url
from search.store.trial_reports import restore_metrics_files
from search.store.warm_marks import own_trials
from spaces.errors import InputError
from trainers.api import registered_trainer

if TYPE_CHECKING:  # the loop, the sweep analysis and pandas load when a campaign runs, not to read a folder
    from search.scaling.sweep import SweepResult

__all__ = [
    "RunOptions",
    "run_campaign",
    "resume_campaign",
    "load_study",
    "CampaignExistsError",
    "CampaignInterrupted",
]

log = logging.getLogger(__name__)


class CampaignExistsError(InputError, RuntimeError):
    """``run`` on a folder that already holds a campaign."""


class CampaignInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped a campaign; ``folder``: where it is kept for ``resume`` (None: nothing was)."""

    def __init__(self, folder: Path | None) -> None:
        super().__init__(str(folder or ""))
        self.folder = folder


def load_study(spec: CampaignSpec, folder: CampaignFolder, create: bool, writer: bool | None = None) -> optuna.Study:
    """The campaign's study, with its seeded sampler and pruner (``writer``: the controller's own).

    A new study's sampler gets the study seed; a loaded one's, a seed of its own for the number of trials
    already in the storage (:func:`~search.loop.sampler_factory.campaign_sampler`), so that a resumed campaign never
    replays a random stream whose trials are already in the storage.
    """
    from search.loop.sampler_factory import campaign_sampler

    storage = open_storage(
        storage_url(spec.study.storage, folder), writer=create if writer is None else writer, create=create
    )
    if create:
        try:
            study = op.create_study(
                study_name=spec.study.name,
                storage=storage,
                sampler=campaign_sampler(spec),
                directions=[optuna.study.StudyDirection[d.upper()] for d in spec.objective_directions],
                load_if_exists=False,
            )
        except optuna.exceptions.DuplicatedStudyError:
            raise CampaignExistsError(
                f"storage {spec.study.storage} already holds a study named {spec.study.name!r}; pick another [study] "
                f"name, or start warm from it with --warm-start '{spec.study.storage}#{spec.study.name}'"
            ) from None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(list(spec.objective_metrics))
        study.set_user_attr(StudyAttr.SPEC_SHA256, spec.sha256)
        study.set_user_attr(SPEC_TEXT, spec.text)
        study.set_user_attr(StudyAttr.SEED, spec.study.seed)
    else:
        study = op.load_study(study_name=spec.study.name, storage=storage, sampler=optuna.samplers.RandomSampler())
        study.sampler = campaign_sampler(spec, trials=len(study.get_trials(deepcopy=False)))
    install_pruner(study, spec.study.pruner, spec.pruning)
    return study


#: Loggers whose records (Dask's errors as a scheduler is lost or a cluster shuts down) go to campaign.log
#: alone while a campaign runs: the terminal gets the one line that says what happened.
_DIVERTED = ("distributed", "tornado", "asyncio")


@contextlib.contextmanager
def _campaign_log(folder: CampaignFolder) -> Iterator[None]:
    ours = _log_file(folder)
    theirs = _log_file(folder)  # Dask's own: LocalCluster(silence_logs=...) sets the level of its loggers' handlers
    loggers = [logging.getLogger(name) for name in ("search", "cluster")]
    diverted = [logging.getLogger(name) for name in _DIVERTED]
    saved = [(logger.level, logger.propagate, list(logger.handlers)) for logger in loggers + diverted]
    for logger in loggers:
        logger.addHandler(ours)
        logger.setLevel(logging.INFO)
        logger.propagate = False  # INFO goes to campaign.log; the terminal shows progress
    for logger in diverted:
        logger.handlers = [theirs]  # at the levels they have (Dask's warnings and errors)
        logger.propagate = False
    try:
        yield
    finally:
        for logger, (level, propagate, handlers) in zip(loggers + diverted, saved):
            logger.handlers = handlers
            logger.setLevel(level)
            logger.propagate = propagate
        ours.close()
        theirs.close()


def _log_file(folder: CampaignFolder) -> logging.FileHandler:
    handler = logging.FileHandler(folder.log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    return handler


def _execute(
    spec: CampaignSpec,
    folder: CampaignFolder,
    options: RunOptions,
    cluster: ClusterOptions,
    new: NewStudy | None = None,
    changes: list[str] | None = None,
) -> None:
    """Run the campaign: a ``new`` study (seeded with its warm start and enqueued trials), or a resumed one."""
    from cluster import DaskExecutor
    from cluster.packing import thread_shortfall
    from search.loop.campaign import Campaign, CampaignError
    from search.loop.progress import Progress
    from search.loop.sampler_factory import campaign_sampler
    from search.scaling.lr_grid import round_label
    from search.session.lr_rounds import enqueue_first_round, lr_range, next_round, round_budget

    create = new is not None
    study = load_study(spec, folder, create, writer=True)
    grid_sampling = (
        "inline" if lr_range(spec.scaling, spec.space) else None
    )  # the rates are enqueued: asked in order, on the loop
    if new is not None:
        for line in new.seed(study):
            print(line)
        seeded = len(study.get_trials(deepcopy=False))
        if seeded:  # a warm start's trials: a sampler seeded apart from the source campaign's, which may share the seed
            study.sampler = campaign_sampler(spec, trials=seeded)
        enqueue_first_round(spec.scaling, spec.space, study)
    else:
        for line in record_spec_changes(study, spec, changes or []):
            print(line)
        if options.retry_failed:
            for line in enqueue_failed(spec.pbt, study):
                print(line)
    progress = Progress(enabled=options.progress)
    way_out.last_words(kept_line(folder.root))  # said if a Ctrl-C's way out outlasts its bound
    # Worker processes inherit these: one BLAS/OpenMP thread per slot keeps 2 trials on 2 cores fast.
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    try:
        with open_cluster(dataclasses.replace(cluster, job_logs=str(folder.job_logs)), env=env) as client:
            info = scheduler_info(client)
            record_environment(folder.environment, capture_environment(info, spec))
            for line in thread_shortfall(info, gpu_packing(spec)):  # fewer trials at once than the GPUs hold
                print(f"hypersweep: warning: {line}", file=sys.stderr)
            round_spec: CampaignSpec | None = round_budget(spec, study)
            ended = False
            while round_spec is not None:  # one round, or (a scaling sweep's lr_grid) until every best is bracketed
                progress.in_round(round_label(spec.scaling, own_trials(study.get_trials(deepcopy=False))))  # its end
                executor = DaskExecutor(
                    client,
                    f"hypersweep-{spec.study.name}-{uuid.uuid4().hex[:8]}",
                    packing=gpu_packing(spec),
                    follows_demand=cluster.backend is not None and cluster.backend.follows_demand,
                )
                campaign = Campaign(
                    round_spec,
                    folder,
                    study,
                    executor,
                    on_progress=progress,
                    hooks=options.hooks,
                    on_notice=progress.note,
                    sampling=grid_sampling,
                )
                campaign.run()
                ended = campaign.budget.stopped or not campaign.budget.time_left()
                round_spec = None if ended else next_round(round_spec, study)
            if not ended and spec.scaling is not None and spec.scaling.branching is not None:
                _branch(spec, folder, client, cluster, progress)
        final_snapshot(op.storage_of(study))  # readers of a big journal (status, report, resume) replay nothing
    except ClusterError as exc:
        if create and not _has_trials(folder):
            raise
        raise ClusterError(
            f"{exc}; the campaign state is saved: continue with 'hypersweep resume {folder.root}'"
        ) from exc
    except OSError as exc:  # a full disk, a read-only folder: one line, and what to do about it
        raise CampaignError(
            f"{exc}; the campaign stopped and its unfinished trials are kept: fix that, then "
            f"'hypersweep resume {folder.root}'"
        ) from exc
    finally:
        progress.close()
    _write_summary(spec, folder, study)


def _branch(spec: CampaignSpec, folder: CampaignFolder, client: Any, cluster: ClusterOptions, progress: Any) -> None:
    """The sweep's ``[scaling.branching]`` study, on the same cluster (:mod:`search.session.branching`)."""
    from cluster import DaskExecutor
    from search.session.branching import run_branching_study

    def executor(name: str) -> DaskExecutor:
        follows = cluster.backend is not None and cluster.backend.follows_demand
        return DaskExecutor(client, name, packing=gpu_packing(spec), follows_demand=follows)

    assert spec.scaling is not None and spec.scaling.branching is not None
    b = spec.scaling.branching
    print(
        f"branching study: a reference run at B={b.reference_batch} to epoch {b.epochs}, branches from epochs "
        f"{', '.join(map(str, b.points))} at {len(b.batch_sizes)} batch sizes x {len(b.lr_factors)} rates, "
        f"in {os.path.relpath(folder.branching)}"
    )
    run_branching_study(spec, folder, lambda s, f, create: load_study(s, f, create, writer=True), executor, progress)


def _write_summary(spec: CampaignSpec, folder: CampaignFolder, study: optuna.Study) -> None:
    from search.reports.summary import trials_frame

    if spec.scaling is not None:
        analyze_scaling(spec, folder, study)
    trials_frame(study, spec.objective_metrics).to_csv(folder.summary, index=False)


def analyze_scaling(spec: CampaignSpec, folder: CampaignFolder, study: optuna.Study) -> SweepResult:
    """The sweep's fit, table, plots and conclusion, in ``scaling/``."""
    from search.scaling.outcomes import goal_of
    from search.scaling.sweep import analyze_sweep

    goal = goal_of(spec)
    assert spec.scaling is not None and goal is not None
    return analyze_sweep(study, spec.scaling, goal, folder.scaling, spec.study.seed)


def run_campaign(spec: CampaignSpec, options: RunOptions) -> CampaignFolder:
    """Start a new campaign for ``spec`` in ``runs_dir/<study name>``."""
    folder = CampaignFolder.for_study(options.runs_dir, spec.study.name)
    cluster = cluster_for(spec, options)  # bad cluster settings fail before anything is created
    new = check_new(spec, options)  # and a bad warm-start source or enqueued configuration
    if options.overwrite:
        remove_campaign(folder.root)  # every check passed: only now is the old campaign deleted
    if folder.root.exists() and any(folder.root.iterdir()):
        raise CampaignExistsError(
            f"{folder.root} already holds a campaign; continue it with 'hypersweep resume {folder.root}' "
            "or pick another [study] name or --runs-dir, or start anew with --overwrite"
        )
    new_runs_dir = not folder.root.parent.exists()
    folder.root.mkdir(parents=True, exist_ok=True)
    lock = ControllerLock(folder.lock)
    lock.acquire()
    created = False
    try:
        folder.create(spec.text)
        created = True
        keep_components(spec.study, folder)
        with _campaign_log(folder):
            _execute(spec, folder, options, cluster, new=new)
    except BaseException as exc:
        if created and not _has_trials(folder) and not _has_job_logs(folder):
            lock.release()
            shutil.rmtree(folder.root, ignore_errors=True)  # nothing ran: leave nothing behind
            if new_runs_dir:
                with contextlib.suppress(OSError):
                    folder.root.parent.rmdir()  # the runs folder this run made, if nothing else is in it
        if isinstance(exc, KeyboardInterrupt):
            raise CampaignInterrupted(folder.root if folder.exists() else None) from exc
        raise
    finally:
        lock.release()
    return folder


def keep_components(spec: StudySpec, folder: CampaignFolder) -> None:
    """Pickle a sampler or pruner object passed from Python into the folder, so that ``resume`` rebuilds it."""
    components.keep(folder.root, "sampler", spec.sampler)
    components.keep(folder.root, "pruner", spec.pruner)


def _has_trials(folder: CampaignFolder) -> bool:
    return folder.trials.exists() and any(folder.trials.iterdir())


def _has_job_logs(folder: CampaignFolder) -> bool:
    """Whether batch jobs ran and logged (they say why no worker joined): their campaign is kept for them."""
    return folder.job_logs.exists() and any(folder.job_logs.iterdir())


def resume_campaign(path: str | Path, options: RunOptions) -> CampaignFolder:
    """Continue the campaign in ``path`` to its budget (``options.n_trials``: a new one; a changed spec: see
    :func:`~search.session.lifecycle.spec_to_resume`)."""
    folder = CampaignFolder.existing(path)
    lock = ControllerLock(folder.lock)
    with lock.held_quietly():  # a refused resume leaves the folder as it was, controller.lock included
        check_environment_record(folder.environment)
        components.restore_kept(folder.root)  # a sampler or pruner object search.run was given
        study = read_resumed_study(load_spec(folder.spec, check_trainer=False).study, folder)  # read once, for both
        spec, changes = spec_to_resume(folder, options, check_trainer=False, study=study)
        given = registered_trainer(spec.trainer.entry) is not None  # search.resume(trainer=...): record and keep it
        retry = options.retry_failed and bool(failed_to_retry(spec.pbt, study))
        # a told trial's metrics.jsonl that a fault cut: rewritten from the study, its record
        restore_metrics_files(own_trials(study.get_trials(deepcopy=False)), folder)
        if not changes and not given and not retry and nothing_left(spec, folder, study):
            return folder  # finished: no trainer import, no cluster; the caller prints its summary
        del study  # the run opens the storage as its writer
        spec = load_spec(folder.spec)  # checked in full now: the trainer, TLS files, components
        cluster = cluster_for(spec, options)
        lock.announce()
        try:
            with _campaign_log(folder):
                _execute(spec, folder, options, cluster, changes=changes)
        except KeyboardInterrupt as exc:
            raise CampaignInterrupted(folder.root) from exc
    return folder


def _rerun(study: optuna.Study) -> str:
    from search.store.failures import rerun_note, retried_failures

    return rerun_note(len(retried_failures(study.get_trials(deepcopy=False))))


def _failures(study: optuna.Study, folder: CampaignFolder) -> str:
    """The failures grouped by reason (count, first line, one trial folder to open), a line each; "" for none."""
    from search.store.failures import failure_groups, failures_block

    return "".join(
        f"{line}\n" for line in failures_block(failure_groups(study.get_trials(deepcopy=False)), folder.root)
    )


def _shown_storage(url: str) -> str:
    """A storage URL as the summary shows it: a journal or SQLite file relative to here when it is below here (a
    valid URL still: ``sqlite:///runs/x/study.db`` is relative), any other URL as it is."""
    from search.store.failures import shown_path

    for prefix in ("journal:", "sqlite:///"):
        if url.startswith(prefix):
            return prefix + shown_path(Path(url.removeprefix(prefix)))
    return url


def summary_text(spec: CampaignSpec, folder: CampaignFolder, study: optuna.Study) -> str:
    """The end-of-campaign table, the trials by state (COMPLETE, PRUNED and FAIL always) and where to find everything."""
    from search.reports.console import closing_lines, fit_table, wrap
    from search.reports.summary import best_table, ranking, state_counts

    directions = spec.objective_directions
    if spec.scaling is None:
        shown, notes = ranking(study, directions)
    else:  # a sweep ranks only the trials that reached its target, as status and the report do
        from search.scaling.outcomes import sweep_outcomes

        trials = study.get_trials(deepcopy=False)
        view = sweep_outcomes(spec, trials)
        assert view is not None
        by_number = {t.number: t for t in trials}
        shown, notes = [by_number[n] for n in view.ranked[:5]], [view.counts_text()]
    table = best_table(study, spec.objective_metrics, directions, shown=shown)
    title = "Pareto front" if spec.study.multi_objective else "Best trials"
    body = fit_table(table) + "".join(f"\n{wrap(note)}" for note in notes)
    url = storage_url(spec.study.storage, folder)
    objectives = ", ".join(f"{m} {d}" for m, d in zip(spec.objective_metrics, spec.objective_directions))
    sweep = ""
    if spec.scaling is not None and folder.scaling_conclusion.exists():
        sweep = (
            f"Batch-size scaling ({spec.study.metrics[0]} target {spec.scaling.target:g}):\n"
            f"{wrap(folder.scaling_conclusion.read_text().strip())}\n"
            f"table and plots: {os.path.relpath(folder.scaling)}\n\n"
        )
    if spec.scaling is not None and spec.scaling.branching is not None:
        from search.reports.branching_section import summary_lines

        sweep += summary_lines(folder.branching)
    counts = state_counts(study)
    states = ["COMPLETE", "PRUNED", "FAIL", *sorted(set(counts) - {"COMPLETE", "PRUNED", "FAIL"})]
    tally = ", ".join(f"{counts.get(state, 0)} {state}" for state in states) + _rerun(study)
    return sweep + (
        f"{title} of study {spec.study.name!r} ({objectives}):\n{body}\n\n"
        f"trials: {tally}\n"
        f"{_failures(study, folder)}"
        f"campaign folder: {os.path.relpath(folder.root)}\n"
        f"storage: {_shown_storage(url)}\n"
        f"trials table: {os.path.relpath(folder.summary)}\n"
        + closing_lines(
            os.path.relpath(folder.root),
            shown[0].number if shown else None,
            "a Pareto-front trial" if spec.study.multi_objective else "the best trial",
        )
    )
