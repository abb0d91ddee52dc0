"""Warm start: the finished trials of an earlier campaign or Optuna study, added to a new study for its sampler.

The source (``[study] warm_start``, ``hypersweep run --warm-start``) is a campaign folder (``runs/digits``)
or an Optuna storage URL with the study's name after ``#`` (``sqlite:///old.db#digits``; the name may be
left out when the storage holds one study). Its COMPLETE trials, and its PRUNED trials that reported
intermediate values, whose parameters fit this campaign's space, are added to the new study once, when it
is created (``Study.add_trials``), each with the user attribute ``warm_start = <source>``. The sampler
(and the pruner) learn from them; they are not this campaign's trials: they take none of its budget and
appear in none of its counts, tables or best values (:func:`own_trials`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import optuna
from optuna.trial import FrozenTrial, TrialState

from search.spec.enqueue import misfit
from search.store.warm_marks import WARM_START, WARM_START_TRIAL, describe, is_warm_start, own_trials
from spaces.errors import InputError

if TYPE_CHECKING:
    from spaces.params import SearchSpace

__all__ = [
    "WARM_START",
    "WarmStart",
    "WarmStartError",
    "is_warm_start",
    "own_trials",
    "warm_start",
    "source_trials",
    "describe",
]

# the marks a copied trial carries, and the readers that leave such trials out, live in search.store.warm_marks


class WarmStartError(InputError):
    """A warm-start source that cannot be read or does not match the campaign (exit status 2)."""


@dataclasses.dataclass(frozen=True)
class WarmStart:
    """What a warm start added: ``used`` trials from ``source``; ``skipped`` did not fit the space."""

    source: str
    used: int
    skipped: int

    def line(self) -> str:
        return (
            f"warm start from {self.source}: {self.used} finished trial(s) used, {self.skipped} skipped "
            "(parameters outside this space); they inform the sampler, not this campaign's counts"
        )


def warm_start(
    study: optuna.Study, source: str, found: list[FrozenTrial], space: SearchSpace, constrained: bool
) -> WarmStart:
    """Add the trials ``found`` in ``source`` (:func:`source_trials`) that fit ``space`` to ``study``; record and
    return them. ``constrained``: the campaign has ``[study] constraints`` (the trials' are kept)."""
    copies = [copy for trial in found if (copy := _copy(trial, space, constrained, source)) is not None]
    study.add_trials(copies)
    done = WarmStart(source, len(copies), len(found) - len(copies))
    study.set_user_attr(WARM_START, dataclasses.asdict(done))
    return done


def source_trials(source: str, directions: tuple[str, ...], metrics: tuple[str, ...]) -> list[FrozenTrial]:
    """The source study's own COMPLETE trials and PRUNED trials with intermediate values, where it optimises the
    campaign's objective (its ``directions`` and ``metrics``, as ``CampaignSpec.objective_*`` give them)."""
    study = _open(source)
    theirs = tuple(d.name.lower() for d in study.directions)
    if theirs != directions:
        raise WarmStartError(f"warm start {source!r}: its study optimises {list(theirs)}, this one {list(directions)}")
    names = study.metric_names
    if names is not None and tuple(names) != metrics:
        raise WarmStartError(f"warm start {source!r}: its study's metrics are {names}, this one's {list(metrics)}")
    finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
    return [t for t in own_trials(finished) if t.state == TrialState.COMPLETE or t.intermediate_values]


def _copy(trial: FrozenTrial, space: SearchSpace, constrained: bool, source: str) -> FrozenTrial | None:
    """``trial`` as a trial of this campaign's ``space`` (its distributions), or None if it does not fit;
    ``constrained``: the campaign has ``[study] constraints`` (the trial's are kept)."""
    dists = space.distributions()
    if any(name not in dists or misfit(dists[name], value) for name, value in trial.params.items()):
        return None
    if any(name not in trial.params for name in space.base_distributions()):
        return None
    complete = trial.state == TrialState.COMPLETE
    constraints = dict(trial.constraints) if constrained and trial.constraints else None
    return optuna.trial.create_trial(
        state=trial.state,
        values=list(trial.values) if complete else None,
        params=dict(trial.params),
        distributions={name: dists[name] for name in trial.params},
        user_attrs={WARM_START: source, WARM_START_TRIAL: trial.number},
        intermediate_values=dict(trial.intermediate_values),
        constraints=constraints,
    )


def _open(source: str) -> optuna.Study:
    """The source's study: a campaign folder's, or ``URL#name`` (the storage's only study without ``#name``)."""
    from search.store.storage import open_storage

    url, name = _locate(source)
    try:
        storage = open_storage(url)
        names = optuna.study.get_all_study_names(storage)
    except Exception as exc:  # noqa: BLE001 - any storage's failure to open, as one line
        raise WarmStartError(f"warm start {source!r}: cannot open the storage ({type(exc).__name__}: {exc})") from None
    if not name and len(names) != 1:
        raise WarmStartError(
            f"warm start {source!r}: the storage holds {len(names)} studies ({', '.join(names)}); name one after '#'"
        )
    name = name or names[0]
    if name not in names:
        raise WarmStartError(
            f"warm start {source!r}: the storage holds no study {name!r} (it holds: {', '.join(names) or 'none'})"
        )
    return optuna.load_study(study_name=name, storage=storage)


def _locate(source: str) -> tuple[str, str]:
    """(storage URL, study name or '') of a campaign folder or a ``URL#name``; a missing file is an error."""
    from search.spec.campaign_spec import load_spec
    from search.store.folder import CampaignFolder
    from search.store.storage import storage_url

    if "://" not in source and not source.startswith("journal:"):
        folder = CampaignFolder(Path(source).resolve())
        if not folder.exists():
            raise WarmStartError(
                f"warm start {source!r}: not a campaign folder (no spec.toml) nor a storage URL "
                "such as sqlite:///old.db#study"
            )
        spec = load_spec(folder.spec, check_trainer=False)
        return storage_url(spec.study.storage, folder), spec.study.name
    url, _, name = source.rpartition("#") if "#" in source else (source, "", "")
    for prefix in ("sqlite:///", "journal:"):
        if url.startswith(prefix) and not Path(url.removeprefix(prefix)).is_file():
            raise WarmStartError(f"warm start {source!r}: no such file {url.removeprefix(prefix)}")
    return url, name
