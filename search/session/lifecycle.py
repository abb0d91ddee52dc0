"""A campaign between its runs: what a new study starts with, and what a resumed one may change.

- A new study gets the warm-start source's finished trials (:mod:`search.session.warm_start`), then the
  enqueued configurations (``[[enqueue]]``, ``--enqueue FILE``, ``search.run(enqueue=...)``) as
  waiting trials, which the first asks run; they count in the trial budget. Neither happens again
  on ``resume``, but for the ``[[enqueue]]`` entries a changed spec adds (:func:`added_enqueue`).
- A resumed campaign runs under its folder's ``spec.toml`` (or ``--spec FILE``); if that differs from
  the spec the study recorded it refuses, listing the changes, unless they are allowed; ``--n-trials N``
  sets the budget (at least the trials already finished). An allowed change is written into
  ``spec.toml`` and recorded in the study (:data:`~search.spec.changes.SPEC_CHANGES`, ``campaign.log``).
"""

from __future__ import annotations

import json
import logging
import time
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from search.compat import optuna_private as op
from search.session.preflight import cluster_for
from search.session.warm_start import WarmStartError, own_trials, source_trials, warm_start
from search.spec.campaign_spec import CampaignSpec, StudySpec, load_spec, parse_spec
from search.spec.changes import SPEC_CHANGES, SPEC_TEXT, resume_text
from search.spec.enqueue import parse_enqueue
from search.spec.reading import parse_toml, read_spec_text
from search.spec.table import SpecError
from search.store.failures import open_failures, retried_failures
from search.store.folder import CampaignFolder, ControllerLock, write_atomic
from search.store.records import Attr, Files, StudyAttr, spec_sha256_of
from search.store.storage import flusher, missing_storage, open_storage, storage_url
from spaces.errors import InputError

if TYPE_CHECKING:
    from search.session.options import RunOptions
    from search.spec.pbt import PBTSpec
    from spaces.params import SearchSpace

__all__ = [
    "ENQUEUED",
    "NewStudy",
    "check_new",
    "check_environment_record",
    "spec_to_resume",
    "nothing_left",
    "read_resumed_study",
    "added_enqueue",
    "record_spec_changes",
    "remove_campaign",
    "CampaignRunningError",
    "enqueue_failed",
    "failed_to_retry",
]

log = logging.getLogger(__name__)

ENQUEUED = "enqueued"  # a trial's user attribute: where its enqueued configuration came from


class NewStudy:
    """What a new campaign's study starts with, checked before anything is created."""

    def __init__(self, spec: CampaignSpec, options: RunOptions) -> None:
        self.enqueue = [(params, "spec [[enqueue]]") for params in spec.enqueue]
        self.enqueue += [(params, options.enqueue_source) for params in options.enqueue]
        if len(self.enqueue) > spec.study.n_trials:
            raise SpecError(
                spec.source,
                "enqueue",
                f"{len(self.enqueue)} enqueued configurations do not fit in the budget of {spec.study.n_trials} trials",
            )
        self.source = options.warm_start or spec.study.warm_start  # the spec's own is checked when it is read
        if options.warm_start and (spec.scaling is not None or spec.pbt is not None):
            raise WarmStartError(
                f"warm start {options.warm_start!r}: a [scaling] sweep or population-based "
                "training ([pbt]) cannot start warm"
            )
        self.found: list[FrozenTrial] = _warm_trials(self.source, spec, from_spec=not options.warm_start)
        self._space, self._constrained = spec.space, bool(spec.study.constraints)  # what the warm trials must fit

    def seed(self, study: optuna.Study) -> list[str]:
        """Add the warm-start trials, then the waiting enqueued ones; the lines that say what was added."""
        lines = []
        if self.source:
            lines.append(warm_start(study, self.source, self.found, self._space, self._constrained).line())
        for params, source in self.enqueue:
            study.enqueue_trial(params, user_attrs={ENQUEUED: source})
        if self.enqueue:
            lines.append(f"enqueued {len(self.enqueue)} configuration(s): they run first, within the budget")
        for line in lines:
            log.info("%s", line)
        return lines


def _warm_trials(source: str, spec: CampaignSpec, from_spec: bool) -> list[FrozenTrial]:
    """The warm-start source's trials; its errors name the spec file and key when the spec gave the source."""
    if not source:
        return []
    try:
        return source_trials(source, spec.objective_directions, spec.objective_metrics)
    except WarmStartError as exc:
        if from_spec:
            raise SpecError(spec.source, "study.warm_start", str(exc).removeprefix("warm start ")) from None
        raise InputError("--warm-start " + str(exc).removeprefix("warm start ")) from None


class CampaignRunningError(InputError, RuntimeError):
    """A folder whose campaign's controller is running cannot be overwritten."""


def remove_campaign(root: Path) -> None:
    """``run --overwrite``, ``search.run(exist_ok="overwrite")``: delete a campaign folder (one that holds a
    campaign or nothing, and whose controller is not running); a missing folder is left as it is."""
    import shutil

    if not root.is_dir():
        return
    folder = CampaignFolder(root)
    if any(root.iterdir()) and not folder.exists():
        raise FileExistsError(f"{root} is not a campaign folder (no spec.toml); not overwriting it")
    if ControllerLock.held(folder.lock):
        raise CampaignRunningError(f"{root}: a controller is running this campaign; not overwriting it")
    shutil.rmtree(root)


def check_new(spec: CampaignSpec, options: RunOptions) -> NewStudy:
    """The new study's warm start and enqueued configurations, checked (a one-line error if one is wrong)."""
    return NewStudy(spec, options)


def enqueue_from(
    entries: Any, space: SearchSpace, n_trials: int, source: str = "enqueue"
) -> tuple[dict[str, Any], ...]:
    """Configurations given in Python (a dict or a list of dicts), checked against ``space`` and the budget."""
    return parse_enqueue(source, "enqueue", entries, space, n_trials)


# --- resume --------------------------------------------------------------------------------------


def spec_to_resume(
    folder: CampaignFolder, options: RunOptions, check_trainer: bool = True, study: optuna.Study | None = None
) -> tuple[CampaignSpec, list[str]]:
    """The spec a resume runs under (written into ``spec.toml``), and its changes from the recorded one;
    ``check_trainer=False``: not checked against its trainer yet (a finished campaign never imports it).
    ``study``: the campaign's study as :func:`read_resumed_study` read it, where the caller has it already."""
    frozen = load_spec(folder.spec, check_trainer=False)
    study = study if study is not None else read_resumed_study(frozen.study, folder)
    where = str(options.spec_file or folder.spec)
    current = read_spec_text(where)
    text, changes = resume_text(
        where, study.user_attrs.get(SPEC_TEXT), spec_sha256_of(study), current, options.n_trials, options.allow_changes
    )
    if options.n_trials is not None:
        _check_budget(options.n_trials, study)
    parsed = parse_spec(parse_toml(where, text), where, text, check_trainer=False)  # its mistakes name its file
    added = added_enqueue(study.user_attrs.get(SPEC_TEXT), parsed.text, parsed.enqueue)
    _check_room(where, len(added), parsed.study.n_trials, study)
    cluster_for(parsed, options)  # a spec.toml a refused resume would leave rewritten: checked before the write
    if text != folder.spec.read_text():
        write_atomic(folder.spec, text)
    return load_spec(folder.spec, check_trainer=check_trainer), changes  # and checked against its trainer


def read_resumed_study(spec: StudySpec, folder: CampaignFolder) -> optuna.Study:
    """The study the frozen spec's ``[study]`` names, read only; a clear error where it is missing."""
    url = storage_url(spec.storage, folder)
    missing = missing_storage(url)
    if missing is not None:
        raise SpecError(
            str(folder.spec),
            "study.storage",
            f"{missing} does not exist: a resumed campaign keeps its storage (was study.storage changed in spec.toml?)",
        )
    storage = open_storage(url)
    try:
        return op.load_study(study_name=spec.name, storage=storage)
    except KeyError:
        raise InputError(
            f"{folder.root}: the storage holds no study {spec.name!r} (was [study] name changed in spec.toml?)"
        ) from None


def nothing_left(spec: CampaignSpec, folder: CampaignFolder, study: optuna.Study | None = None) -> bool:
    """The campaign has finished its trial budget and left no trial running or waiting: a resume has nothing to
    run, and needs neither the trainer nor a cluster. (PBT populations and a sweep without its conclusion
    written are left to the loop.) ``study``: as in :func:`spec_to_resume`."""
    if spec.pbt is not None or (spec.scaling is not None and not folder.scaling_conclusion.exists()):
        return False
    if spec.scaling is not None and spec.scaling.branching is not None:
        if not (folder.branching / Files.BRANCHING_SUMMARY).exists():
            return False  # its branching study is left to run
    study = study if study is not None else read_resumed_study(spec.study, folder)
    trials = _counted(study)
    if any(not t.state.is_finished() for t in trials):
        return False
    return len(trials) >= spec.study.n_trials


def _counted(study: optuna.Study) -> list[FrozenTrial]:
    """The trials the budget counts: the campaign's own, but failures a later trial re-runs (``--retry-failed``)."""
    every = study.get_trials(deepcopy=False)
    retried = retried_failures(every)
    return [t for t in own_trials(every) if t.number not in retried]


def failed_to_retry(pbt: PBTSpec | None, study: optuna.Study) -> list[FrozenTrial]:
    """``resume --retry-failed``: the failed trials no later trial re-runs yet (a PBT population, ``pbt``, is
    refused: its members' failures are part of its generations)."""
    if pbt is not None:
        raise InputError("--retry-failed: a population-based training campaign ([pbt]) cannot re-run failed members")
    return open_failures(study.get_trials(deepcopy=False))


def enqueue_failed(pbt: PBTSpec | None, study: optuna.Study) -> list[str]:
    """Enqueue each failed trial's parameters as a new trial (``retry_of`` its number), as Optuna users do with
    ``study.enqueue_trial``: they run first, and the failed ones leave the trial budget. The line that says so."""
    failed = failed_to_retry(pbt, study)
    for trial in failed:
        study.enqueue_trial(
            dict(trial.params),
            user_attrs={ENQUEUED: f"retry of trial {trial.number}", Attr.RETRY_OF: trial.number},
            skip_if_exists=False,
        )
    flusher(op.storage_of(study), sync=True)()
    if not failed:
        return ["--retry-failed: no failed trial to re-run"]
    line = f"re-running {len(failed)} failed trial(s) with their parameters first; they leave the trial budget"
    log.info("%s", line)
    return [line]


def _check_budget(n_trials: int, study: optuna.Study) -> None:
    """The new budget holds every trial already finished, and those left running, which the resume re-runs."""
    trials = _counted(study)
    finished = sum(t.state.is_finished() for t in trials)
    running = sum(t.state == TrialState.RUNNING for t in trials)
    if n_trials < max(finished + running, 1):
        raise InputError(
            f"--n-trials {n_trials}: must be >= {max(finished + running, 1)}, the trials this campaign "
            f"has already finished ({finished}) or left running ({running}), which a resume re-runs"
        )


def check_environment_record(path: Path) -> None:
    """A campaign's ``environment.json``, if there is one, is a JSON object: a resume appends to it, and must not
    silently replace a record it cannot read."""
    if not path.exists():
        return
    try:
        record = json.loads(read_spec_text(path, what="JSON"))
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{path}: the environment record is not valid JSON ({exc}); restore it, or move it "
            "aside to resume with a new one"
        ) from None
    except SpecError as exc:
        raise InputError(f"{path}: the environment record {exc.problem}; restore it, or move it aside") from None
    if not isinstance(record, dict):
        raise InputError(
            f"{path}: the environment record is a JSON {type(record).__name__}, not an object; "
            "restore it, or move it aside to resume with a new one"
        )


def _check_room(where: str, added: int, n_trials: int, study: optuna.Study) -> None:
    """The configurations a changed ``[[enqueue]]`` adds fit in what is left of the budget."""
    left = max(0, n_trials - len(own_trials(study.get_trials(deepcopy=False))))
    if added > left:
        raise SpecError(
            where,
            "enqueue",
            f"{added} new configuration(s) do not fit in the {left} trial(s) left "
            f"of the budget of {n_trials}; raise it with --n-trials",
        )


def added_enqueue(recorded: str | None, text: str, enqueue: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    """The ``[[enqueue]]`` entries (``enqueue``, parsed from the spec ``text``) that the ``recorded`` spec text did
    not have (none if it is unknown)."""
    if recorded is None:
        return []
    before = _raw_enqueue(recorded)
    added = []
    for raw, params in zip(_raw_enqueue(text), enqueue):
        if raw in before:
            before.remove(raw)  # each recorded entry matches one entry: listed twice now, the second is new
        else:
            added.append(params)
    return added


def _rename_metrics(study: optuna.Study, metrics: tuple[str, ...]) -> None:
    """A changed ``[study] metric``: the study's metric names (optuna-dashboard's, ``study.metric_names``) follow."""
    import warnings

    names = list(metrics)
    if study.metric_names is not None and list(study.metric_names) != names:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(names)


def _raw_enqueue(text: str) -> list[Any]:
    entries = tomllib.loads(text).get("enqueue", [])
    return [entries] if isinstance(entries, dict) else list(entries)


def record_spec_changes(study: optuna.Study, spec: CampaignSpec, changes: list[str]) -> list[str]:
    """Record the spec the study now runs under (text and hash) and, if any, the changes that led to it; enqueue
    the ``[[enqueue]]`` entries it adds to the recorded one. The line that says so, if any."""
    added = added_enqueue(study.user_attrs.get(SPEC_TEXT), spec.text, spec.enqueue)
    for params in added:
        study.enqueue_trial(params, user_attrs={ENQUEUED: "spec [[enqueue]], added on resume"})
    if changes:
        history = list(study.user_attrs.get(SPEC_CHANGES) or [])
        history.append({"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "changes": changes})
        study.set_user_attr(SPEC_CHANGES, history)
        log.info("resumed under a changed spec: %s", "; ".join(changes))
    if changes or study.user_attrs.get(SPEC_TEXT) != spec.text:
        study.set_user_attr(SPEC_TEXT, spec.text)
        study.set_user_attr(StudyAttr.SPEC_SHA256, spec.sha256)
        _rename_metrics(study, spec.objective_metrics)
    flusher(op.storage_of(study), sync=True)()
    if not added:
        return []
    line = f"enqueued {len(added)} configuration(s) new in [[enqueue]]: they run next, within the budget"
    log.info("%s", line)
    return [line]
