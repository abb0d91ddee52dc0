"""Optuna's private API, behind one seam: every use of it in hypersweep goes through this module.

The controller's fast paths lean on Optuna internals: the journal storage's replay state (the writer applies its
own entries), TPE's estimators and splits (fits kept between asks), the study's storage and trial ids, ``tell``
without its deep copy, ``study.stop()`` inside a callback. Each Optuna release may move them. So they come in
families, and each family is checked once, on first use, by a self-test that builds a small in-memory study and
looks at what the family relies on (names, signatures, a behaviour):

============  ==========================================================  ==========================================
family        private path                                                public path (where the check fails)
============  ==========================================================  ==========================================
``study``     ``study._storage``, ``._study_id``, ``trial._trial_id``,    the storage remembered when the study was
              ``_get_trials(use_cache=)``, ``_stop_flag``, ...             opened here, ids looked up by name/number,
                                                                          ``get_trials``, ``stop`` caught per call
``tell``      ``optuna.study._tell._tell_with_warning``                   ``study.tell``
``journal``   ``JournalStorage``'s replay state, ``BaseJournalSnapshot``  ``JournalStorage`` on the group-commit
                                                                          backend (no snapshot, Optuna's replay)
``samplers``  ``optuna.samplers._tpe.*``, ``optuna._transform``           Optuna's ``TPESampler``/``RandomSampler``
============  ==========================================================  ==========================================

The first check logs one line naming which path each family runs (:func:`describe`); ``hypersweep check
--versions`` prints it too. ``HYPERSWEEP_OPTUNA_PUBLIC=1`` (or ``=journal,samplers``) forces the public path.
Classes that subclass an Optuna class and use its private members (``RefitTPESampler``, the journal storages,
``RandomDraws``) declare them in :data:`MEMBERS`, which the check verifies; ``tests/test_optuna_seam.py`` fails on a
private access outside this module that is not declared there.
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
import weakref
from collections.abc import Callable, Container, Iterable, Mapping
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.storages import BaseStorage, InMemoryStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

_import_errors: dict[str, str] = {}

try:  # journal
    from optuna.storages.journal._base import BaseJournalSnapshot
    from optuna.storages.journal._storage import JournalOperation, JournalStorageReplayResult
except ImportError as exc:  # pragma: no cover - another Optuna: the public journal storage
    _import_errors["journal"] = str(exc)

    class BaseJournalSnapshot:  # type: ignore[no-redef]
        """Stands in for the missing base so that the journal module still imports (never instantiated)."""


try:  # samplers
    from optuna._transform import _SearchSpaceTransform as SearchSpaceTransform
    from optuna.distributions import _get_single_value as _single_value
    from optuna.samplers._tpe._truncnorm import _log_gauss_mass as log_gauss_mass
    from optuna.samplers._tpe._truncnorm import _norm_logpdf as norm_logpdf
    from optuna.samplers._tpe.parzen_estimator import _ParzenEstimator as ParzenEstimator
    from optuna.samplers._tpe.probability_distributions import (
        _BatchedCategoricalDistributions as BatchedCategorical,
    )
    from optuna.samplers._tpe.probability_distributions import (
        _BatchedTruncLogNormDistributions as BatchedTruncLogNorm,
    )
    from optuna.samplers._tpe.probability_distributions import (
        _BatchedTruncNormDistributions as BatchedTruncNorm,
    )
    from optuna.samplers._tpe.probability_distributions import _log_gauss_mass_unique as log_gauss_mass_unique
    from optuna.samplers._tpe.probability_distributions import _unique_inverse_2d as unique_inverse_2d
    from optuna.samplers._tpe.sampler import _get_infeasible_trial_score as infeasible_score
    from optuna.samplers._tpe.sampler import _split_complete_trials as split_complete
    from optuna.samplers._tpe.sampler import _split_infeasible_trials as split_infeasible
    from optuna.samplers._tpe.sampler import _split_pruned_trials as split_pruned
    from optuna.samplers._tpe.sampler import default_gamma, default_gamma_multiobjective
except ImportError as exc:
    _import_errors["samplers"] = str(exc)

try:  # tell
    from optuna.study._tell import _tell_with_warning
except ImportError as exc:  # pragma: no cover - another Optuna: its public tell
    _import_errors["tell"] = str(exc)

try:  # study
    from optuna.study._constrained_optimization import _CONSTRAINTS_KEY
except ImportError as exc:  # pragma: no cover - another Optuna
    _import_errors["study"] = str(exc)

__all__ = [
    "FAMILIES",
    "MEMBERS",
    "uses",
    "paths",
    "describe",
    "reset",
    "create_study",
    "load_study",
    "storage_of",
    "study_id",
    "trial_id",
    "frozen_id",
    "get_trials",
    "tell",
    "run_callback",
    "keep_user_attrs",
    "forget_cached_trials",
    "contains",
    "single_value",
    "constraints_key",
]

log = logging.getLogger(__name__)

FAMILIES = ("study", "tell", "journal", "samplers")
PRIVATE, PUBLIC = "private", "public"

# The private members of an Optuna class that hypersweep's subclasses of it use (self._name), by base class.
MEMBERS: dict[str, tuple[str, ...]] = {
    "optuna.samplers.TPESampler": (
        "_build_parzen_estimator",
        "_compare",
        "_compute_acquisition_func",
        "_constant_liar",
        "_gamma",
        "_get_internal_repr",
        "_get_params",
        "_group",
        "_is_multivariate",
        "_n_ei_candidates",
        "_n_startup_trials",
        "_parzen_estimator_cls",
        "_parzen_estimator_parameters",
        "_random_sampler",
        "_rng",
        "_sample",
        "_sample_relative",
    ),
    "optuna.samplers.RandomSampler": ("_rng",),
    "optuna.storages.JournalStorage": (
        "_backend",
        "_replay_result",
        "_sync_with_backend",
        "_thread_lock",
        "_worker_id_prefix",
    ),
}
_FAMILY_OF_BASE = {
    "optuna.samplers.TPESampler": "samplers",
    "optuna.samplers.RandomSampler": "samplers",
    "optuna.storages.JournalStorage": "journal",
}

_lock = threading.Lock()
_paths: dict[str, tuple[str, str]] | None = None  # family -> (path, why)
_private: frozenset[str] | None = None  # the families whose private path runs
_storages: weakref.WeakKeyDictionary[optuna.Study, BaseStorage] = weakref.WeakKeyDictionary()


# ---------------------------------------------------------------------------------------------------- the check


def _forced_public() -> set[str]:
    value = os.environ.get("HYPERSWEEP_OPTUNA_PUBLIC", "").strip().lower()
    if value in ("", "0", "no", "false"):
        return set()
    if value in ("1", "yes", "true", "all"):
        return set(FAMILIES)
    return {name.strip() for name in value.split(",")} & set(FAMILIES)


def _probe_study() -> None:
    storage = InMemoryStorage()
    sid = storage.create_new_study([StudyDirection.MINIMIZE], "hypersweep-probe")
    study = optuna.Study(study_name="hypersweep-probe", storage=storage)
    assert study._storage is storage and study._study_id == sid, "study._storage / study._study_id"
    trial = study.ask()
    assert trial._trial_id == storage.get_trial_id_from_study_id_trial_number(sid, 0), "trial._trial_id"
    assert trial._cached_frozen_trial.number == 0, "trial._cached_frozen_trial"
    frozen = study._get_trials(deepcopy=False, states=(TrialState.RUNNING,), use_cache=False)
    assert [t._trial_id for t in frozen] == [trial._trial_id], "Study._get_trials / FrozenTrial._trial_id"
    assert study._thread_local.in_optimize_loop is False and study._stop_flag is False, "study.stop()'s flags"
    study._thread_local.cached_all_trials = None
    assert FloatDistribution(0, 1)._contains(0.5) and not IntDistribution(0, 3)._contains(4.0), "_contains"
    assert isinstance(_CONSTRAINTS_KEY, str), "_CONSTRAINTS_KEY"


def _probe_tell() -> None:
    params = inspect.signature(_tell_with_warning).parameters
    assert {"study", "trial", "value_or_values", "state"} <= set(params), "_tell_with_warning's arguments"


def _probe_journal() -> None:
    from optuna.storages.journal import BaseJournalBackend, JournalStorage

    class Memory(BaseJournalBackend):
        def __init__(self) -> None:
            self.logs: list[dict[str, Any]] = []

        def read_logs(self, log_number_from: int) -> Iterable[dict[str, Any]]:
            return self.logs[log_number_from:]

        def append_logs(self, logs: list[dict[str, Any]]) -> None:
            self.logs.extend(logs)

    backend = Memory()
    storage = JournalStorage(backend)
    _has_members(storage, "optuna.storages.JournalStorage")
    sid = storage.create_new_study([StudyDirection.MINIMIZE], "hypersweep-probe")
    tid = storage.create_new_trial(sid)
    state = storage._replay_result
    assert isinstance(state, JournalStorageReplayResult), "JournalStorageReplayResult"
    assert storage._backend is backend and hasattr(storage._thread_lock, "__enter__"), "_backend / _thread_lock"
    assert state._trials[tid].number == 0 and state._trial_id_to_study_id[tid] == sid, "the replay's trial tables"
    assert state._study_id_to_trial_ids[sid] == [tid], "the replay's trial tables"
    assert state.log_number_read == len(backend.logs) and isinstance(state.worker_id, str), "the replay's counters"
    assert state._trial_exists_and_updatable(tid, {}), "_trial_exists_and_updatable"
    assert {"SET_TRIAL_PARAM", "SET_TRIAL_USER_ATTR"} <= set(JournalOperation.__members__), "JournalOperation"
    assert callable(getattr(BaseJournalSnapshot, "load_snapshot", None)), "BaseJournalSnapshot"
    assert isinstance(storage._worker_id_prefix, str), "_worker_id_prefix"
    storage._sync_with_backend()


def _probe_samplers() -> None:
    sampler = optuna.samplers.TPESampler(seed=0)
    _has_members(sampler, "optuna.samplers.TPESampler")
    _has_members(optuna.samplers.RandomSampler(seed=0), "optuna.samplers.RandomSampler")
    assert default_gamma(10) == 1 and default_gamma_multiobjective(10) >= 1, "default_gamma"
    assert set(inspect.signature(ParzenEstimator).parameters) >= {"observations", "search_space", "parameters"}
    assert SearchSpaceTransform({"x": FloatDistribution(0, 1)}).bounds.shape == (1, 2), "_SearchSpaceTransform"
    assert _single_value(IntDistribution(3, 3)) == 3, "_get_single_value"
    for fn in (infeasible_score, split_complete, split_infeasible, split_pruned, log_gauss_mass_unique):
        assert callable(fn), fn
    assert callable(log_gauss_mass) and callable(norm_logpdf), "_truncnorm"
    assert callable(unique_inverse_2d), "_unique_inverse_2d"
    assert all(isinstance(c, type) for c in (BatchedCategorical, BatchedTruncNorm, BatchedTruncLogNorm))


def _has_members(instance: object, base: str) -> None:
    missing = [name for name in MEMBERS[base] if not hasattr(instance, name)]
    assert not missing, f"{base} lacks {', '.join(missing)}"


_PROBES: dict[str, Callable[[], None]] = {
    "study": _probe_study,
    "tell": _probe_tell,
    "journal": _probe_journal,
    "samplers": _probe_samplers,
}


def _check(family: str, forced: set[str]) -> tuple[str, str]:
    if family in forced:
        return PUBLIC, "HYPERSWEEP_OPTUNA_PUBLIC"
    if family in _import_errors:
        return PUBLIC, _import_errors[family]
    quiet = logging.getLogger("optuna")  # its storages log each study they create
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        _PROBES[family]()
    except Exception as exc:  # any way the private API moved: the public path serves
        return PUBLIC, f"{type(exc).__name__}: {exc}"
    finally:
        quiet.setLevel(level)
    return PRIVATE, ""


def paths() -> dict[str, tuple[str, str]]:
    """Each family's path (``"private"`` or ``"public"``) and why it is public; checked once per process."""
    global _paths, _private
    with _lock:
        if _paths is None:
            forced = _forced_public()
            _paths = {family: _check(family, forced) for family in FAMILIES}
            _private = frozenset(f for f, (path, _) in _paths.items() if path == PRIVATE)
            level = logging.INFO if len(_private) == len(FAMILIES) else logging.WARNING
            log.log(level, "%s", describe(_paths))
    return _paths


def uses(family: str) -> bool:
    """Whether ``family``'s private path runs (its check passed). Lock-free once checked: the hot paths ask it."""
    private = _private
    if private is None:
        private = frozenset(f for f, (path, _) in paths().items() if path == PRIVATE)
    return family in private


def describe(found: Mapping[str, tuple[str, str]] | None = None) -> str:
    """One line: which path each family runs, and why a public one does."""
    found = paths() if found is None else found
    private = [f for f, (p, _) in found.items() if p == PRIVATE]
    public = [f"{f} ({why})" for f, (p, why) in found.items() if p == PUBLIC]
    parts = [f"private fast paths: {', '.join(private) or 'none'}"]
    if public:
        parts.append(f"public API for {'; '.join(public)}")
    return f"optuna {optuna.__version__}: " + "; ".join(parts)


def reset() -> None:
    """Check again on next use (tests that break or restore the private API)."""
    global _paths, _private
    with _lock:
        _paths, _private = None, None


# ---------------------------------------------------------------------------------------------------- studies


def create_study(storage: str | BaseStorage | None = None, **kwargs: Any) -> optuna.Study:
    """``optuna.create_study``, with the study's storage remembered for the public path of :func:`storage_of`."""
    opened = optuna.storages.get_storage(storage) if storage is not None else InMemoryStorage()
    study = optuna.create_study(storage=opened, **kwargs)
    _storages[study] = opened
    return study


def load_study(storage: str | BaseStorage, **kwargs: Any) -> optuna.Study:
    """``optuna.load_study``, with the study's storage remembered (see :func:`create_study`)."""
    opened = optuna.storages.get_storage(storage)
    study = optuna.load_study(storage=opened, **kwargs)
    _storages[study] = opened
    return study


def storage_of(study: optuna.Study) -> BaseStorage:
    """The study's storage (``study._storage``)."""
    if uses("study"):
        storage: BaseStorage = study._storage
        return storage
    found = _storages.get(study)
    if found is None:
        raise RuntimeError(f"study {study.study_name!r} was not opened through search.compat.optuna_private")
    return found


def study_id(study: optuna.Study) -> int:
    """The study's id in its storage (``study._study_id``)."""
    if uses("study"):
        return int(study._study_id)
    return storage_of(study).get_study_id_from_name(study.study_name)


def trial_id(trial: optuna.Trial) -> int:
    """A live trial's id in its storage (``trial._trial_id``)."""
    if uses("study"):
        return int(trial._trial_id)
    return trial.storage.get_trial_id_from_study_id_trial_number(study_id(trial.study), trial.number)


def frozen_id(study: optuna.Study, frozen: FrozenTrial) -> int:
    """A frozen trial of ``study``: its id in the storage (``frozen._trial_id``)."""
    if uses("study"):
        return int(frozen._trial_id)
    return storage_of(study).get_trial_id_from_study_id_trial_number(study_id(study), frozen.number)


def get_trials(
    study: Any, deepcopy: bool = True, states: Container[TrialState] | None = None, use_cache: bool = False
) -> list[FrozenTrial]:
    """``study._get_trials`` (its cache of the trials within a sampler call); public: ``study.get_trials``."""
    if uses("study"):
        trials: list[FrozenTrial] = study._get_trials(deepcopy=deepcopy, states=states, use_cache=use_cache)
        return trials
    return list(study.get_trials(deepcopy=deepcopy, states=states))


def forget_cached_trials(study: optuna.Study) -> None:
    """Drop the study's per-thread trial cache, as ``Study.ask`` does when it starts."""
    if uses("study"):
        study._thread_local.cached_all_trials = None


def tell(study: optuna.Study, trial: optuna.Trial, values: list[float] | None, state: TrialState) -> None:
    """``study.tell(trial, values, state=state)``, less the deep copy of the told trial that it returns."""
    if uses("tell"):
        _tell_with_warning(study=study, trial=trial, value_or_values=values, state=state)
    else:
        study.tell(trial, values, state=state)


def run_callback(
    study: optuna.Study, callback: Callable[[optuna.Study, FrozenTrial], None], frozen: FrozenTrial
) -> bool:
    """Call an Optuna callback as ``study.optimize`` would (``study.stop()`` works in it); return whether it
    called ``study.stop()``."""
    if uses("study"):
        local = study._thread_local
        study._stop_flag, was = False, local.in_optimize_loop
        local.in_optimize_loop = True
        try:
            callback(study, frozen)
        finally:
            local.in_optimize_loop = was
            stop, study._stop_flag = study._stop_flag, False
        return bool(stop)
    stopped: list[bool] = []
    study.stop = lambda: stopped.append(True)  # type: ignore[method-assign]
    try:
        callback(study, frozen)
    finally:
        del study.stop
    return bool(stopped)


def keep_user_attrs(trial: optuna.Trial, fields: Mapping[str, Any]) -> bool:
    """Several user attributes in one storage call, where the storage has ``set_trial_user_attrs`` (the
    controller's journal) and the private path runs; False: set them one by one."""
    together = getattr(trial.storage, "set_trial_user_attrs", None)
    if together is None or not uses("study"):
        return False
    together(trial._trial_id, fields)
    trial._cached_frozen_trial.user_attrs.update(fields)  # as ``Trial.set_user_attr`` keeps it
    return True


# ---------------------------------------------------------------------------------------------------- distributions


def contains(dist: BaseDistribution, internal: float) -> bool:
    """Whether an internal value lies in the distribution (``dist._contains``)."""
    if uses("study"):
        return bool(dist._contains(internal))
    if isinstance(dist, CategoricalDistribution):
        index = int(internal)
        return index == internal and 0 <= index < len(dist.choices)
    if isinstance(dist, (FloatDistribution, IntDistribution)):
        if not dist.low <= internal <= dist.high:
            return False
        if dist.step is None:
            return True
        k = (internal - dist.low) / dist.step
        return abs(k - round(k)) < 1e-8
    return True


def single_value(dist: BaseDistribution) -> Any:
    """The one value of a single-valued distribution (``optuna.distributions._get_single_value``)."""
    if uses("samplers"):
        return _single_value(dist)
    if isinstance(dist, CategoricalDistribution):
        return dist.choices[0]
    if isinstance(dist, (FloatDistribution, IntDistribution)):
        return dist.low
    raise ValueError(f"{dist!r} is not single-valued")


def constraints_key() -> str:
    """The system attribute prefix Optuna stores a trial's constraints under (``_CONSTRAINTS_KEY``)."""
    return str(_CONSTRAINTS_KEY) if uses("study") else "constraints"


def mixture_of(estimator: Any) -> Any:
    """A TPE Parzen estimator's mixture (``_ParzenEstimator._mixture_distribution``)."""
    return estimator._mixture_distribution


def space_of(estimator: Any) -> dict[str, BaseDistribution]:
    """A TPE Parzen estimator's search space (``_ParzenEstimator._search_space``)."""
    space: dict[str, BaseDistribution] = estimator._search_space
    return space


# ---------------------------------------------------------------------------------------------------- the journal


def new_replay_state(storage: Any) -> Any:
    """A fresh replay result for ``storage`` (nothing replayed yet)."""
    return JournalStorageReplayResult(storage._worker_id_prefix)


def replay_trials(state: Any) -> dict[int, FrozenTrial]:
    """The replay's trials by id (``_trials``)."""
    trials: dict[int, FrozenTrial] = state._trials
    return trials


def set_replay_trials(state: Any, trials: dict[int, FrozenTrial]) -> None:
    state._trials = trials


def study_of_trial(state: Any) -> dict[int, int]:
    """Trial id -> study id (``_trial_id_to_study_id``)."""
    found: dict[int, int] = state._trial_id_to_study_id
    return found


def trials_of_study(state: Any) -> dict[int, list[int]]:
    """Study id -> its trial ids in order (``_study_id_to_trial_ids``)."""
    found: dict[int, list[int]] = state._study_id_to_trial_ids
    return found


def updatable(state: Any, trial_id: int, log_entry: dict[str, Any]) -> bool:
    """Whether replay would apply an entry to the trial (``_trial_exists_and_updatable``)."""
    return bool(state._trial_exists_and_updatable(trial_id, log_entry))


def backend_of(storage: Any) -> Any:
    """The journal storage's backend (``_backend``); None for another storage."""
    return getattr(storage, "_backend", None)


def trial_id_in_replay(frozen: FrozenTrial) -> int:
    """A replayed trial's id (``FrozenTrial._trial_id``)."""
    return int(frozen._trial_id)


def seek_table(backend: Any, lines: int, size: int) -> None:
    """Tell Optuna's ``JournalFileBackend`` that line ``lines`` starts at byte ``size`` (its ``_log_number_offset``
    table; without it the backend scans every line before: correct, only slower)."""
    offsets = getattr(backend, "_log_number_offset", None)
    if isinstance(offsets, dict):
        offsets[lines] = size


def journal_operation(name: str) -> Any:
    """A ``JournalOperation`` member by name."""
    return JournalOperation[name]
