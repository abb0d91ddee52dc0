"""The spec's trainer: found by name and checked against what it declares.

The trainer is imported (with torch and whatever else it needs) only here, only to check a spec: it is
looked for on ``sys.path``, then in the spec's folder and the current directory (:func:`trainer_paths`,
:func:`find_trainer`). ``load_spec(path)`` runs :func:`check_trainer` for ``run``, ``resume`` and
``check``; ``reproduce`` runs it on a spec loaded with ``check_trainer=False``.
"""

from __future__ import annotations

import inspect
import os
import tempfile
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.compat.versions import extra_hint
from search.sampling.pruning import RESOURCE_METRIC
from search.spec.kept_trainer import recorded_trainer_paths, stored_trainer
from search.spec.keys import DATA_PARALLEL
from search.spec.table import SpecError, _closest

if TYPE_CHECKING:
    from search.spec.campaign_spec import CampaignSpec

__all__ = ["check_trainer", "find_trainer", "trainer_paths", "unchecked_metrics_note"]


def check_trainer(spec: CampaignSpec) -> CampaignSpec:
    """Import the spec's trainer (by name) and check the spec against what it declares; return the spec.

    ``run``, ``resume``, ``check`` and ``reproduce`` need this; reading a finished campaign does not.
    """
    from trainers.api import capabilities_of  # by name, only to validate

    fn = find_trainer(spec.trainer.entry, spec.source)
    if spec.trainer.objective:  # an Optuna objective(trial): the campaign runs it wrapped as a trainer
        from search.objective.trainer import as_trainer

        fn = as_trainer(fn, spec.trainer.entry, spec.study.metrics)
    _check_signature(spec.source, spec.trainer.entry, fn)
    info = capabilities_of(fn)
    if info.accepted_params is not None:
        _check_params(spec.source, spec.trainer.entry, spec.space.names, info.accepted_params)
    if info.reported_metrics is not None:
        _check_metrics(spec, info.reported_metrics)
    if spec.pbt is not None and not info.supports_pbt:
        raise SpecError(
            spec.source,
            "study.scheduler",
            f"trainer {spec.trainer.entry} does not declare supports_pbt (schedule_epochs, inherit_checkpoint)",
        )
    return spec


def unchecked_metrics_note(spec: CampaignSpec) -> str:
    """``check``'s note when the trainer declares no ``reported_metrics``: the spec's metrics cannot be checked
    before trials run (a trainer that never reports one then stops the campaign early, ``[study] fail_fast``)."""
    from trainers.api import capabilities_of  # by name, only to validate

    if capabilities_of(find_trainer(spec.trainer.entry, spec.source)).reported_metrics is not None:
        return ""
    names = ", ".join(repr(m) for m in (*spec.study.metrics, *spec.study.constraints))
    stop = (
        f"; a campaign whose first {spec.study.fail_fast} trials do not return it stops early"
        if spec.study.fail_fast
        else ""
    )
    return (
        f"note: trainer {spec.trainer.entry} declares no reported_metrics, so {names} is checked only when trials "
        f"finish (declare them with @trainer(reported_metrics=...) to check them here){stop}"
    )


def _check_signature(source: str, entry: str, fn: Any) -> None:
    """The trainer can be called as ``fit(config, reporter)`` (a function whose signature cannot be read passes)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(None, None)
    except TypeError:
        raise SpecError(
            source, "trainer.entry", f"{entry} takes {signature}, but a trainer is called as fit(config, reporter)"
        ) from None


def _check_params(source: str, entry: str, names: Iterable[str], accepted: frozenset[str]) -> None:
    """Every searched parameter (but the controller's own ``data_parallel``) is one the trainer accepts."""
    for name in names:
        if name not in accepted and name != DATA_PARALLEL:
            raise SpecError(
                source,
                f"space.{name}",
                f"trainer {entry} does not accept this parameter{_closest(name, sorted(accepted))}",
            )


def _check_metrics(spec: CampaignSpec, reported: frozenset[str]) -> None:
    """The objective metrics, the constraints and the pruner's counted resource are metrics the trainer reports."""
    study, entry = spec.study, spec.trainer.entry
    checked = [("study.metric", m) for m in study.metrics] + [("study.constraints", c) for c in study.constraints]
    for key, metric in checked:
        if metric not in reported:
            raise SpecError(
                spec.source, key, f"trainer {entry} never reports {metric!r}{_closest(metric, sorted(reported))}"
            )
    counted = RESOURCE_METRIC[spec.pruning.resource]
    if study.pruner != "none" and counted not in reported:
        raise SpecError(
            spec.source,
            "pruner.resource",
            f"{spec.pruning.resource!r} needs the trainer to report {counted!r}, and {entry} does not",
        )


def _import_failure(entry: str, exc: BaseException) -> str:
    """What importing ``entry``'s module raised, in words, and the file its traceback is written to: a temporary
    file, since ``check`` writes nothing near the spec or the campaign."""
    text = "".join(traceback.format_exception(exc))
    fd, path = tempfile.mkstemp(prefix="hypersweep-trainer-import-", suffix=".log")
    with os.fdopen(fd, "w") as fh:
        fh.write(f"importing the trainer {entry}\n{text}")
    module = entry.partition(":")[0]
    return f"importing module {module!r} raised {type(exc).__name__}: {exc} (traceback in {path})"


def trainer_paths(source: str) -> tuple[str, ...]:
    """The folders the trainer is looked for in after ``sys.path``: the spec's folder, the current directory,
    and, for a campaign's frozen spec, the folders its campaign recorded (``environment.json``), so that
    ``resume``, ``reproduce`` and a re-run of the frozen spec find the trainer the campaign ran. ``source``: where
    the spec was read from."""
    spec_file = Path(source)
    here = spec_file.resolve().parent if spec_file.is_file() else None
    paths = ([str(here)] if here else []) + [os.getcwd()] + (recorded_trainer_paths(here) if here else [])
    return tuple(dict.fromkeys(paths))


def find_trainer(entry: str, source: str) -> Any:
    """The trainer function ``entry`` of the spec read from ``source``, looked for on ``sys.path`` and in
    :func:`trainer_paths` (which its workers get too); for a campaign's frozen spec whose trainer was handed over
    by value (defined in a script or notebook), the copy the campaign kept. A trainer that cannot be found is a :class:`SpecError` on ``trainer.entry``."""
    from trainers.api import TrainerImportError, load_trainer, register_trainer  # by name, only to validate

    try:
        return load_trainer(entry, trainer_paths(source))
    except TrainerImportError as exc:
        problem = str(exc) + extra_hint(getattr(exc.__cause__, "name", None))  # an optional framework: its extra
    except Exception as exc:  # noqa: BLE001 - the user's module raised on import: one line, its traceback in a file
        raise SpecError(source, "trainer.entry", _import_failure(entry, exc)) from None
    try:
        kept = stored_trainer(Path(source).parent, entry) if Path(source).is_file() else None
    except Exception as exc:  # noqa: BLE001 - an unpicklable copy (a module it needs is gone): say so, in one line
        kept, problem = None, f"{problem}; the campaign's kept copy cannot be loaded ({type(exc).__name__}: {exc})"
    if kept is None:
        raise SpecError(source, "trainer.entry", problem)
    register_trainer(kept, entry)
    return kept
