"""The Python API: run, resume and read campaigns from a script or a notebook.

```python
import search

result = search.run("examples/digits.toml")         # a spec file, a TOML string or a dict
result = search.run(spec, trainer=fit)               # a trainer defined right here (script or notebook)
result.best, result.trials, result.history, result.study, result.folder, result.best_checkpoint
search.run(spec, sampler=optuna.samplers.TPESampler(seed=1), pruner=optuna.pruners.MedianPruner())  # any Optuna object
search.run(spec, callbacks=[fn], on_report=hook)     # fn(study, frozen_trial) after each tell; hook(number, step, metrics)
search.run(spec, exist_ok="resume")                  # re-runnable cell: continue the folder's campaign ("overwrite": anew)
search.resume("runs/digits")                         # continue it to its budget
search.resume("runs/digits", n_trials=40)            # ... to a new budget, kept for later resumes
search.run(spec, enqueue=[{"lr": 0.01}], warm_start="runs/digits")  # known-good configs first; an earlier study's trials
search.load("runs/digits")                           # read it: no cluster, no trainer needed
```

Each call is what ``hypersweep run`` / ``resume`` do, in this process, and returns a
:class:`Result` instead of printing. A ``trainer=`` function is registered under its
``module:qualname`` (``__main__:fit`` for a script's or notebook's function), written into the
frozen spec as ``[trainer] entry``, and goes to the workers by value (pickled as Dask pickles
callables), so it need not be importable there; the campaign keeps a copy (``trainer.pkl``) for
``reproduce`` and ``resume``.

No ``if __name__ == "__main__":`` guard is needed: worker and sampler processes start with
``spawn``, which re-runs the main script (or module) in every child unless ``__main__`` has no
file; while a campaign runs, ``__main__``'s ``__file__`` and ``__spec__`` are hidden, so the children
start without it (they need nothing from it: the trainer travels by value).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.spec.toml_text import to_toml
from spaces.errors import InputError

if TYPE_CHECKING:
    import optuna
    import pandas as pd

    from search.loop.eta import Eta
    from search.loop.hooks import Callback, CampaignHooks, ReportHook
    from search.reports.cost_status import CampaignCost
    from search.reports.reproduce import Reproduction
    from search.spec.campaign_spec import CampaignSpec

__all__ = ["run", "resume", "load", "Result", "to_toml"]

EXIST_OK = ("error", "resume", "overwrite")  # search.run(exist_ok=...): what a folder holding a campaign gets


@dataclasses.dataclass(frozen=True)
class Result:
    """A campaign, read back: its ``folder``, frozen ``spec`` and Optuna ``study``, and tables of its trials."""

    folder: Path
    spec: CampaignSpec
    study: optuna.Study

    @property
    def trials(self) -> pd.DataFrame:
        """One row per trial: number, state, the objective metric(s), duration, parameters, every other final
        metric, the trial's ``folder`` and ``checkpoint`` (None where it wrote none), reason."""
        from search.results import trials_table
        from search.store.folder import CampaignFolder

        return trials_table(self.study, self.spec.objective_metrics, CampaignFolder(self.folder))

    @property
    def history(self) -> pd.DataFrame:
        """Every report: one row per (trial, step, metric) with its ``value`` and ``time`` (a long table); a finished
        trial's from the study, where a fault cannot have cut it (a running one's from its ``metrics.jsonl``)."""
        from search.results import history_frame
        from search.store.folder import CampaignFolder

        return history_frame(self.study, CampaignFolder(self.folder))

    @property
    def cost(self) -> CampaignCost:
        """What the campaign has cost (slot- or GPU-hours spent, and left of ``[study] slot_hours``/``gpu_hours``)
        and its expected end, read from the study now: while a campaign runs, each read is current."""
        from search.reports.cost_status import campaign_cost
        from search.store.records import StudyAttr
        from search.store.warm_marks import own_trials

        trials = own_trials(self.study.get_trials(deepcopy=False))
        return campaign_cost(self.spec, trials, self.study.user_attrs.get(StudyAttr.SLOTS))

    @property
    def eta(self) -> Eta | None:
        """The running campaign's expected end (seconds left: a mean and a 90% interval); None when nothing is
        running or nothing is known yet."""
        return self.cost.eta

    @property
    def best_checkpoint(self) -> Path | None:
        """The best trial's checkpoint in its folder (single objective; None if none completed or it wrote none)."""
        from search.results import checkpoint_of

        trial = self._best_trial()
        return None if trial is None else checkpoint_of(self.folder / "trials" / str(trial.number))

    @property
    def best(self) -> pd.DataFrame:
        """The best complete trials (up to 5), or the Pareto front of a multi-objective study."""
        from search.reports.summary import best_table

        return best_table(self.study, self.spec.objective_metrics, self.spec.objective_directions)

    @property
    def best_params(self) -> dict[str, Any] | None:
        """The best complete trial's parameters as its trainer got them (single objective; None if none completed)."""
        from search.reports.summary import trial_params

        trial = self._best_trial()
        return None if trial is None else trial_params(trial)

    @property
    def best_value(self) -> float | None:
        trial = self._best_trial()
        return None if trial is None else float(trial.values[0])

    def _best_trial(self) -> optuna.trial.FrozenTrial | None:
        if self.spec.study.multi_objective:
            raise ValueError("a multi-objective study has a Pareto front, not one best trial: see .best")
        from search.session.warm_start import is_warm_start

        trials = self.study.get_trials(deepcopy=False)
        if any(is_warm_start(t) for t in trials):  # the best of this campaign's own trials
            table = self.best
            return None if table.empty else next(t for t in trials if t.number == int(table["number"].iloc[0]))
        try:
            return self.study.best_trial
        except ValueError:  # no complete trial
            return None

    def summary(self) -> str:
        """The end-of-campaign text ``hypersweep run`` prints: the best trials, the counts by state, the files."""
        from search.session.runner import summary_text
        from search.store.folder import CampaignFolder

        return summary_text(self.spec, CampaignFolder(self.folder), self.study)

    def report(self) -> Path:
        """Write the study report (as ``hypersweep report``); the path of its ``index.html``."""
        from search.reports.report import write_report

        return Path(write_report(self.folder).index)

    def reproduce(self, number: int, tolerance: float | None = None) -> Reproduction:
        """Re-run trial ``number`` alone and compare it with its record (as ``hypersweep reproduce``)."""
        from search.reports.reproduce import DEFAULT_TOLERANCE, reproduce_trial

        return reproduce_trial(self.folder, number, DEFAULT_TOLERANCE if tolerance is None else tolerance)

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        from search.reports.summary import state_counts

        counts = ", ".join(f"{n} {state}" for state, n in sorted(state_counts(self.study).items())) or "no trials"
        return f"<search.Result {self.spec.study.name!r}: {counts}; folder {self.folder}>"


def run(
    spec: str | Path | Mapping[str, Any] | CampaignSpec,
    trainer: Callable[..., Any] | None = None,
    *,
    runs_dir: str | Path = "runs",
    n_workers: int | None = None,
    scheduler: str | None = None,
    progress: bool = True,
    insecure: bool = False,
    tls: tuple[str, str, str] | None = None,
    enqueue: Mapping[str, Any] | list[Mapping[str, Any]] | None = None,
    warm_start: str | Path | None = None,
    sampler: optuna.samplers.BaseSampler | None = None,
    pruner: optuna.pruners.BasePruner | None = None,
    callbacks: Sequence[Callback] = (),
    on_report: ReportHook | None = None,
    exist_ok: str = "error",
) -> Result:
    """Run a new campaign in ``runs_dir/<study name>/`` and return it.

    ``spec``: a spec file's path, a TOML string, a dict of the same tables (``{"study": {...}, "space":
    {...}}``) or a loaded spec. ``trainer``: a ``fit(config, reporter)`` function; it replaces the
    spec's ``[trainer] entry`` (which then names it, e.g. ``__main__:fit``) and goes to the workers by
    value. ``n_workers``, ``scheduler``, ``insecure`` and ``tls`` are ``hypersweep run``'s ``--workers``,
    ``--scheduler``, ``--insecure`` and ``--tls``. ``enqueue``: configurations to run first (a dict of
    parameter values or a list of them, as ``--enqueue``); ``warm_start``: an earlier campaign folder or
    ``"sqlite:///old.db#study"`` whose finished trials the sampler learns from (as ``--warm-start``).
    ``sampler`` / ``pruner``: any Optuna ``BaseSampler`` / ``BasePruner``, replacing the spec's (the frozen spec
    names its class; the object is kept pickled in the folder for ``resume``). ``callbacks``: functions
    ``fn(study, frozen_trial)`` called after each tell; ``on_report``: ``hook(trial_number, step, metrics)``
    for each report; either may end the campaign with ``study.stop()`` or :class:`StopCampaign` (see
    :mod:`search.loop.hooks`). ``exist_ok``: a folder that already holds this campaign is an error
    (``"error"``), is continued (``"resume"``, as :func:`resume`) or is deleted and started anew (``"overwrite"``).
    Raises what the command reports as one line (a :class:`~search.spec.table.SpecError`, an existing
    campaign folder, a cluster that cannot start).
    """
    from cluster.executor import ship_trainer
    from search.session.lifecycle import enqueue_from
    from search.session.runner import RunOptions, run_campaign

    if exist_ok not in EXIST_OK:
        raise InputError(f"exist_ok={exist_ok!r}: must be one of {', '.join(map(repr, EXIST_OK))}")
    if trainer is not None:
        ship_trainer(trainer)  # one that cannot go to the workers fails here, before anything starts
    from search.loop.hooks import CampaignHooks

    hooks = CampaignHooks(callbacks, on_report)
    campaign = load_spec_like(spec, trainer, _registered("sampler", sampler), _registered("pruner", pruner))
    existing = Path(runs_dir) / campaign.study.name
    if exist_ok == "resume" and (existing / "spec.toml").is_file():
        return resume(
            existing,
            trainer,
            n_workers=n_workers,
            scheduler=scheduler,
            progress=progress,
            insecure=insecure,
            tls=tls,
            callbacks=callbacks,
            on_report=on_report,
        )
    options = _options(RunOptions, runs_dir, n_workers, scheduler, progress, insecure, tls)
    options = dataclasses.replace(
        options,
        overwrite=exist_ok == "overwrite",
        warm_start=None if warm_start is None else str(warm_start),
        enqueue_source="search.run(enqueue=...)",
        enqueue=enqueue_from(enqueue, campaign, "search.run(enqueue=...)") if enqueue is not None else (),
        hooks=hooks,
    )
    with _quiet(), main_kept_from_children(), _python_hint():
        folder = run_campaign(campaign, options)
    _raise_hook_error(hooks)
    return _checked(_result(folder.root, campaign))


def resume(
    folder: str | Path,
    trainer: Callable[..., Any] | None = None,
    *,
    n_workers: int | None = None,
    scheduler: str | None = None,
    progress: bool = True,
    insecure: bool = False,
    tls: tuple[str, str, str] | None = None,
    n_trials: int | None = None,
    spec: str | Path | None = None,
    allow_changes: bool = False,
    retry_failed: bool = False,
    sampler: optuna.samplers.BaseSampler | None = None,
    pruner: optuna.pruners.BasePruner | None = None,
    callbacks: Sequence[Callback] = (),
    on_report: ReportHook | None = None,
) -> Result:
    """Continue the campaign in ``folder`` to its budget (as ``hypersweep resume``) and return it.

    ``trainer``: the function to run from now on under the frozen spec's entry (e.g. the notebook's
    ``fit`` again after a restart); without it the entry is imported, or the campaign's kept copy
    (``trainer.pkl``) of a by-value trainer is used. ``n_trials``: the new trial budget (``--n-trials``,
    kept for later resumes); ``spec``: a spec file to run the rest under (``--spec``); a spec that differs
    from the campaign's is refused unless ``allow_changes`` (``--allow-changes``); ``retry_failed``: each failed
    trial runs again with its parameters (``--retry-failed``), the failed ones leaving the budget. ``sampler`` / ``pruner``:
    the objects :func:`run` was given, again (needed only where they did not pickle); ``callbacks`` and
    ``on_report``: as for :func:`run`.
    """
    from search.session.runner import RunOptions, resume_campaign
    from search.spec.campaign_spec import load_spec
    from trainers.api import register_trainer

    root = Path(folder).resolve()
    if trainer is not None and (root / "spec.toml").is_file():
        register_trainer(trainer, load_spec(root / "spec.toml", check_trainer=False).trainer.entry)
    if n_trials is not None and n_trials < 1:
        raise InputError(f"n_trials={n_trials!r}: must be >= 1")
    options = _options(RunOptions, "runs", n_workers, scheduler, progress, insecure, tls)
    _registered("sampler", sampler)
    _registered("pruner", pruner)
    from search.loop.hooks import CampaignHooks

    hooks = CampaignHooks(callbacks, on_report)
    options = dataclasses.replace(
        options,
        n_trials=n_trials,
        allow_changes=allow_changes,
        retry_failed=retry_failed,
        spec_file=None if spec is None else Path(spec),
        hooks=hooks,
    )
    with _quiet(), main_kept_from_children(), _python_hint():
        done = resume_campaign(root, options)
    _raise_hook_error(hooks)
    return _checked(load(done.root))


def load(folder: str | Path) -> Result:
    """Read the campaign in ``folder`` (running or finished); needs neither a cluster nor the trainer."""
    from search.spec.campaign_spec import load_spec
    from search.store.folder import CampaignFolder

    campaign = CampaignFolder(Path(folder).resolve())
    if not campaign.exists():
        raise FileNotFoundError(f"{campaign.root} holds no campaign (no spec.toml)")
    return _result(campaign.root, load_spec(campaign.spec, check_trainer=False))


def _registered(kind: str, obj: Any) -> str | None:
    """Register a sampler or pruner object for this process; its entry (None for None)."""
    from search.sampling import components

    return None if obj is None else components.register(kind, obj)


def _raise_hook_error(hooks: CampaignHooks) -> None:
    if hooks.error is not None:
        raise hooks.error


@contextlib.contextmanager
def _python_hint() -> Iterator[None]:
    """A :class:`CampaignExistsError` names the Python calls that continue or replace the campaign, and so does
    a :class:`~search.store.failures.TrialsFailedError` the calls that re-run its trials."""
    from search.session.runner import CampaignExistsError
    from search.store.failures import TrialsFailedError

    try:
        yield
    except TrialsFailedError as exc:
        raise _in_python(exc) from None
    except CampaignExistsError as exc:
        message = str(exc).replace("continue it with 'hypersweep resume ", "continue it with search.resume('")
        message = message.replace(
            "' or pick another", "') or search.run(..., exist_ok='resume' or 'overwrite'), or pick another"
        )
        message = message.replace(", or start anew with --overwrite", "")
        raise CampaignExistsError(message.replace("--runs-dir", "runs_dir")) from None


def _in_python(exc: Any) -> Any:
    """``exc`` (a :class:`~search.store.failures.TrialsFailedError`) with the commands it names as Python calls."""
    import re

    message = re.sub(r"'hypersweep resume (\S+) --retry-failed'", r"search.resume('\1', retry_failed=True)", str(exc))
    message = re.sub(r"'hypersweep run \S+ --overwrite'", "search.run(..., exist_ok='overwrite')", message)
    return type(exc)(message, exc.groups, exc.folder)


def _checked(result: Result) -> Result:
    """``result``, unless every one of its trials failed: then what the command line exits 4 for, raised
    (:class:`~search.store.failures.AllTrialsFailedError`, with the failures grouped by reason)."""
    from search.store.failures import all_failed_error

    error = all_failed_error(result.study.get_trials(deepcopy=False), result.folder)
    if error is not None:
        raise _in_python(error)
    return result


def _result(root: Path, spec: CampaignSpec) -> Result:
    from search.session.runner import load_study
    from search.store.folder import CampaignFolder

    with _quiet(dask=False):
        study = load_study(spec, CampaignFolder(root), create=False)
    return Result(root, spec, study)


def _options(
    cls: Any,
    runs_dir: str | Path,
    n_workers: int | None,
    scheduler: str | None,
    progress: bool,
    insecure: bool,
    tls: tuple[str, str, str] | None,
) -> Any:
    if n_workers is not None and n_workers < 1:
        raise InputError(f"n_workers={n_workers!r}: must be >= 1")
    return cls(
        runs_dir=Path(runs_dir),
        scheduler=scheduler,
        n_workers=n_workers,
        progress=progress,
        insecure=insecure,
        tls=tuple(tls) if tls else None,
    )


# --- the spec ---------------------------------------------------------------------------------------


def load_spec_like(
    spec: str | Path | Mapping[str, Any] | CampaignSpec,
    trainer: Callable[..., Any] | None = None,
    sampler: str | None = None,
    pruner: str | None = None,
) -> CampaignSpec:
    """A checked spec from a path, a TOML string, a dict or a spec; ``trainer`` replaces ``[trainer] entry``,
    ``sampler`` / ``pruner`` (entries of registered objects) ``[study] sampler`` / ``pruner`` (and drop
    ``[sampler]``, and ``[pruner]``'s settings but ``resource``).

    A spec given as a file and nothing passed is read as ``hypersweep run`` reads it (the same text is
    frozen); otherwise the spec is written out as TOML (with what was passed), and that text is frozen.
    """
    from search.spec.campaign_spec import CampaignSpec, load_spec, parse_spec
    from trainers.api import register_trainer

    entry = register_trainer(trainer) if trainer is not None else None
    passed = entry or sampler or pruner  # something to write into the spec
    if isinstance(spec, CampaignSpec):
        if not passed:
            return spec
        source, data = spec.source, _toml_data(spec.text, spec.source)
    elif isinstance(spec, Mapping):
        source, data = "<dict spec>", _plain(spec)
    elif isinstance(spec, Path) or (isinstance(spec, str) and "\n" not in spec and "[" not in spec):
        if not passed:
            return load_spec(spec)
        frozen = load_spec(spec, check_trainer=False)  # its mistakes, as one line naming the file
        source, data = frozen.source, tomllib.loads(frozen.text)
    elif isinstance(spec, str):
        if not passed:
            return parse_spec(_toml_data(spec, "<TOML string>"), "<TOML string>", spec)
        source, data = "<TOML string>", _toml_data(spec, "<TOML string>")
    else:
        raise TypeError(f"spec must be a path, a TOML string, a dict or a CampaignSpec, not {type(spec).__name__}")
    return _rewritten(data, source, entry, sampler, pruner)


def _rewritten(
    data: dict[str, Any], source: str, entry: str | None, sampler: str | None, pruner: str | None
) -> CampaignSpec:
    """The spec ``data`` with what Python passed in (trainer, sampler, pruner entries), written out as TOML."""
    from search.spec.campaign_spec import parse_spec

    if entry is not None:
        data = {**data, "trainer": {**dict(data.get("trainer") or {}), "entry": entry}}
    if sampler is not None:
        data = {
            **{k: v for k, v in data.items() if k != "sampler"},
            "study": {**data.get("study", {}), "sampler": sampler},
        }
    if pruner is not None:
        kept = {k: v for k, v in dict(data.get("pruner") or {}).items() if k == "resource"}
        data = {**data, "study": {**data.get("study", {}), "pruner": pruner}, "pruner": kept}
    passed = [f"{what} {name}" for what, name in (("trainer", entry), ("sampler", sampler), ("pruner", pruner)) if name]
    header = f"# written by search.run from {source}" + (f"; {', '.join(passed)} passed in Python" if passed else "")
    text = to_toml(data, header=header)
    return parse_spec(tomllib.loads(text), source, text)


def _toml_data(text: str, source: str) -> dict[str, Any]:
    from search.spec.table import SpecError

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(source, "toml", f"not valid TOML ({exc})") from None


def _plain(value: Any) -> Any:
    """A dict spec as TOML sees it: mappings as dicts, tuples as lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


# --- the process ------------------------------------------------------------------------------------


@contextlib.contextmanager
def main_kept_from_children() -> Iterator[None]:
    """While it lasts, processes started with ``spawn`` or ``forkserver`` do not re-run ``__main__``.

    Such a child runs the parent's main script (``__file__``) or module (``__spec__``) again, as
    ``__mp_main__``, before its own work: a script without an ``if __name__ == "__main__":`` guard would
    start its campaign again in every Dask worker and sampler process. A notebook's ``__main__`` has
    neither, and is never re-run. Nothing the children run needs it (the trainer goes by value).
    """
    main = sys.modules.get("__main__")
    names = ("__file__", "__spec__")
    saved = {name: main.__dict__[name] for name in names if main is not None and name in main.__dict__}
    if main is None or (saved.get("__file__") is None and saved.get("__spec__") is None):
        yield
        return
    main.__dict__.pop("__file__", None)
    main.__spec__ = None
    try:
        yield
    finally:
        main.__dict__.update(saved)


@contextlib.contextmanager
def _quiet(dask: bool = True) -> Iterator[None]:
    """As the command line: Optuna at WARNING (for the call) and, with ``dask``, no Dask INFO chatter (for good,
    like ``hypersweep``)."""
    import optuna

    if dask:
        from cluster import quiet_dask_logs

        quiet_dask_logs()
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(max(level, optuna.logging.WARNING))
    try:
        yield
    finally:
        optuna.logging.set_verbosity(level)
