"""The contract between a trainer and whoever runs it.

A trainer is a plain function ``fit(config: TrialConfig, reporter: Reporter) -> dict``.
It depends on nothing but this module (and torch): no Dask, no Optuna. The same
function runs under the campaign controller, alone from ``python -m trainers``, or
in a test with :class:`RecordingReporter`.

A trainer may declare what it can do (:class:`TrainerInfo`: the params it accepts, the
metrics it reports, whether it trains in PBT segments) with :func:`declare` or the
:func:`trainer` decorator; :func:`capabilities_of` reads it back, and a spec is checked
against it before a campaign starts. Undeclared trainers work too: anything goes.
This module stays free of torch, so the controller can read declarations cheaply.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import importlib
import json
import math
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

__all__ = [
    "TrialConfig",
    "Reporter",
    "RecordingReporter",
    "PrintReporter",
    "TrainerFn",
    "load_trainer",
    "register_trainer",
    "registered_trainer",
    "running_trainer",
    "trainer_folders",
    "entry_of",
    "TrainerImportError",
    "TrainerInfo",
    "declare",
    "trainer",
    "capabilities_of",
    "report_values",
    "objective_values",
]

_SCALARS = (bool, int, float, str, type(None))


def _check_builtin(value: Any, where: str) -> None:
    """Raise unless ``value`` is made of builtin scalars, lists and str-keyed dicts."""
    if isinstance(value, _SCALARS):
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_builtin(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where}: key {key!r} must be a str")
            _check_builtin(item, f"{where}.{key}")
        return
    raise TypeError(
        f"{where} = {value!r} has type {type(value).__name__}; "
        "a trial config holds only builtin types (bool, int, float, str, list, dict)"
    )


@dataclasses.dataclass(frozen=True)
class TrialConfig:
    """Everything one trial needs, as plain serialisable data.

    ``params`` are the sampled (and fixed) hyperparameters; ``options`` are the
    trainer's fixed settings from the spec's ``[trainer.options]`` table.
    ``devices`` are the accelerator ids this trial may use (empty on CPU), as CUDA numbers them where the
    trainer runs. A trial holding a GPU lease runs in a process of its own whose ``CUDA_VISIBLE_DEVICES`` is
    that lease, so there ``devices`` is ``(0, ..., n-1)``: ``cuda:0`` (or just ``"cuda"``) is its first GPU,
    and no other GPU is visible (what Ray does per actor). ``visible_devices`` is the lease as that
    ``CUDA_VISIBLE_DEVICES`` value (the worker's physical ids, ``"3"`` or ``"2,5"``). A data-parallel trial's
    launcher gets the worker's indices of the lease instead and gives each rank its one device the same way
    (``CUDA_VISIBLE_DEVICES`` = its id, ``cuda:0`` inside). With ``[trainer] gpus = 1/k`` several trials
    hold the same device (a share of it each), each in its own process.
    ``oom_retry``: ``"accumulate"`` lets the built-in trainer re-run an out-of-memory trial once at half
    the micro-batch (``trainers.oom``); a custom trainer may read it too.
    ``checkpoint_dir`` is where the trainer may write checkpoints (``None``: don't).
    ``log_dir`` is where whoever runs the trial keeps what it prints (``stdout.log``; ``None``:
    nowhere special); ``trainers.ddp`` then copies its ranks' output into its own streams.
    Population-based training runs a trial in segments: ``epochs`` is where this
    segment ends, ``schedule_epochs`` the whole run the LR schedule spans, and
    ``inherit_checkpoint`` lets the trial continue from a checkpoint another trial
    wrote (copied in by the controller) with this trial's own hyperparameters.
    A later segment of a trial may override some of its ``params`` (a resized trial's learning rate, after a
    rule): ``base_params`` are then the trial's own parameters before any override, which identify its
    checkpoints, so the segment resumes the trial's own checkpoint (empty: ``params`` identify them).
    """

    study: str
    number: int
    params: Mapping[str, Any]
    seed: int
    epochs: int
    dataset: str = "digits"
    device: str = "auto"
    devices: tuple[int, ...] = ()
    data_parallel: int = 1
    checkpoint_dir: str | None = None
    checkpoint_every: int = 1
    deterministic: bool = False
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    schedule_epochs: int | None = None
    inherit_checkpoint: bool = False
    log_dir: str | None = None
    visible_devices: str = ""
    oom_retry: str = "none"
    base_params: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def own_params(self) -> Mapping[str, Any]:
        """The trial's own parameters (what identifies its checkpoints): ``base_params``, else ``params``."""
        return self.base_params or self.params

    def __post_init__(self) -> None:
        if not isinstance(self.number, int) or self.number < 0:
            raise ValueError(f"number={self.number!r}: must be an int >= 0")
        if not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            raise ValueError(f"seed={self.seed!r}: must be an int in [0, 2**63)")
        if not isinstance(self.epochs, int) or self.epochs < 1:
            raise ValueError(f"epochs={self.epochs!r}: must be an int >= 1")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device={self.device!r}: must be one of 'auto', 'cpu', 'cuda'")
        if not isinstance(self.data_parallel, int) or self.data_parallel < 1:
            raise ValueError(f"data_parallel={self.data_parallel!r}: must be an int >= 1")
        if self.schedule_epochs is not None and (
            not isinstance(self.schedule_epochs, int) or self.schedule_epochs < self.epochs
        ):
            raise ValueError(f"schedule_epochs={self.schedule_epochs!r}: must be an int >= epochs ({self.epochs})")
        if self.oom_retry not in ("none", "accumulate"):
            raise ValueError(f"oom_retry={self.oom_retry!r}: must be 'none' or 'accumulate'")
        if not isinstance(self.checkpoint_every, int) or self.checkpoint_every < 1:
            raise ValueError(f"checkpoint_every={self.checkpoint_every!r}: must be an int >= 1")
        _check_builtin(dict(self.params), "params")
        _check_builtin(dict(self.options), "options")
        _check_builtin(dict(self.base_params), "base_params")
        object.__setattr__(self, "devices", tuple(int(d) for d in self.devices))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``from_dict`` inverts it); ``params`` and ``options`` copied one level deep (not
        ``dataclasses.asdict``'s deep copy, which the controller paid twice a trial)."""
        data = {field.name: getattr(self, field.name) for field in _CONFIG_FIELDS}
        data["params"] = dict(self.params)
        data["options"] = dict(self.options)
        if self.base_params:  # a later segment's; absent otherwise, so a config record reads as before
            data["base_params"] = dict(self.base_params)
        else:
            del data["base_params"]
        data["devices"] = list(self.devices)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrialConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown trial config keys {unknown}; known keys: {sorted(known)}")
        return cls(**{**data, "devices": tuple(data.get("devices", ()))})

    @classmethod
    def from_json_file(cls, path: str | Path) -> TrialConfig:
        return cls.from_dict(json.loads(Path(path).read_text()))


_CONFIG_FIELDS = dataclasses.fields(TrialConfig)


@runtime_checkable
class Reporter(Protocol):
    """What a trainer may call while it trains.

    ``report`` never blocks on a decision; ``should_stop`` tells the trainer that the
    controller asked it to stop (pruned, time limit); the trainer then returns its
    last metrics promptly. A trainer resumed from its checkpoint reports again the
    reports the checkpoint covers (one may have been lost with a dying worker); the
    controller keeps each (step, metrics) once. A reporter on the cluster also has
    ``query(question) -> answer`` (plain dicts): a question to the controller, waited for,
    which an Optuna objective's ``trial`` asks for each suggestion (``search.optimize``);
    a trainer needs none.
    """

    def report(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def should_stop(self) -> bool: ...


def objective_values(value: Any) -> tuple[float, ...] | None:
    """What a trainer returned as an Optuna objective returns it: a number or a tuple of numbers (the values of the
    study's objectives), as floats; ``None`` for anything else."""
    if _is_number(value):
        return (float(value),)
    if isinstance(value, (tuple, list)) and value and all(_is_number(v) for v in value):
        return tuple(float(v) for v in value)
    return None


def _is_number(value: Any) -> bool:
    """A real number (an int, a float, a numpy or 0-d torch scalar), not a bool and not text."""
    if isinstance(value, (bool, str, bytes)) or not hasattr(value, "__float__"):
        return False
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def report_values(step: int, metrics: Mapping[str, Any]) -> dict[str, float]:
    """A report's metrics as floats; a value that is not a number is a ``TypeError`` naming its key and value (a
    report's values become Optuna intermediate values, pruning inputs and TensorBoard scalars: numbers only, as
    Optuna's own ``trial.report`` insists)."""
    plain: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, (str, bytes)):
            raise TypeError(_not_a_number(step, key, value))
        try:
            plain[str(key)] = float(value)
        except (TypeError, ValueError):
            raise TypeError(_not_a_number(step, key, value)) from None
    return plain


def _not_a_number(step: int, key: Any, value: Any) -> str:
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    return (
        f"report at step {step}: {str(key)!r} = {shown} ({type(value).__name__}) is not a number; a report holds "
        "numbers only (print text to the trial's stdout.log instead)"
    )


class RecordingReporter:
    """Keeps every report in memory; stops after ``stop_after`` reports if given."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.reports: list[tuple[int, dict[str, float]]] = []
        self._stop_after = stop_after

    def report(self, step: int, metrics: Mapping[str, float]) -> None:
        self.reports.append((int(step), report_values(step, metrics)))

    def should_stop(self) -> bool:
        return self._stop_after is not None and len(self.reports) >= self._stop_after


class PrintReporter(RecordingReporter):
    """Prints each report as one JSON line (used by ``python -m trainers``)."""

    def report(self, step: int, metrics: Mapping[str, float]) -> None:
        super().report(step, metrics)
        print(json.dumps({"step": int(step), **{k: _json_float(v) for k, v in metrics.items()}}), flush=True)


def _json_float(value: float) -> float | str:
    value = float(value)
    return value if math.isfinite(value) else repr(value)


TrainerFn = Callable[[TrialConfig, Reporter], Mapping[str, float]]


class TrainerImportError(ImportError):
    """A trainer entry point ``module:function`` that cannot be loaded."""


# --- finding a trainer ------------------------------------------------------------------------
# A trainer is named by ``"module:function"``. It is looked for on ``sys.path`` and then in the
# folders given for it (the spec's folder, the current directory), which are remembered per entry
# so that whoever runs it elsewhere (a Dask worker) can be handed the same folders. A function handed
# over in this process (``search.run(spec, trainer=fit)``, a trainer defined in a script or notebook)
# is registered under its entry and found without any import. On a worker, a trainer shipped by value
# is found under its entry while it runs (:func:`running_trainer`), e.g. to launch its data-parallel ranks.

_IN_PROCESS: dict[str, TrainerFn] = {}  # entry -> a function handed over in this process
_RUNNING: contextvars.ContextVar[tuple[str, TrainerFn] | None] = contextvars.ContextVar("running_trainer", default=None)
_FOLDERS: dict[str, tuple[str, ...]] = {}  # entry -> the folders it is looked for in (and shipped with)


def entry_of(fn: Callable[..., Any]) -> str:
    """The ``"module:qualname"`` naming ``fn`` (``"__main__:fit"`` for a script's or notebook's function)."""
    module = getattr(fn, "__module__", None) or "__main__"
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__qualname__
    return f"{module}:{name}"


def register_trainer(fn: TrainerFn, entry: str | None = None) -> str:
    """Make ``load_trainer(entry)`` return ``fn`` in this process (the newest registration wins); return the entry.

    Runners ship a registered trainer to their workers by value (pickled with the code of a function
    defined in ``__main__``), so it need not be importable there.
    """
    if not callable(fn):
        raise TrainerImportError(f"trainer {fn!r} is not callable")
    entry = entry or entry_of(fn)
    _check_entry(entry)
    _IN_PROCESS[entry] = fn
    _remember(entry, _module_root(getattr(fn, "__module__", None)))
    return entry


def registered_trainer(entry: str) -> TrainerFn | None:
    """The function running under ``entry`` in this thread (:func:`running_trainer`), else the one registered
    under it in this process, if any."""
    running = _RUNNING.get()
    if running is not None and running[0] == entry:
        return running[1]
    return _IN_PROCESS.get(entry)


@contextlib.contextmanager
def running_trainer(entry: str, fn: TrainerFn) -> Iterator[None]:
    """Within the block, in this thread only, ``entry`` names ``fn`` (:func:`registered_trainer`, :func:`load_trainer`).

    A worker runs each trial's trainer in it: one shipped by value (a script's or notebook's function, a
    closure) can then launch its data-parallel ranks by its entry, and two campaigns' trainers of one
    name running side by side on one worker do not mix.
    """
    token = _RUNNING.set((entry, fn))
    try:
        yield
    finally:
        _RUNNING.reset(token)


def trainer_folders(entry: str) -> tuple[str, ...]:
    """The folders ``entry`` was looked for in here, and the folder its module came from (outside the Python
    installation): what a worker elsewhere needs on its path to import it too."""
    return _FOLDERS.get(entry, ())


def load_trainer(entry: str, paths: Iterable[str | Path] = ()) -> TrainerFn:
    """Return the function ``"package.module:function"`` names: a registered one, else imported.

    ``paths``: folders to look in after ``sys.path`` (appended to it when missing), e.g. the spec's
    folder and the current directory; they are remembered for :func:`trainer_folders`.
    """
    _check_entry(entry)
    folders = [str(Path(p).resolve()) for p in paths]
    for folder in folders:
        if folder not in sys.path:
            sys.path.append(folder)
    _remember(entry, *folders)
    registered = registered_trainer(entry)
    if registered is not None:
        return registered
    module_name, _, attr = entry.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        where = f"; looked on sys.path and in {', '.join(folders)}" if folders else ""
        raise TrainerImportError(
            f"trainer entry {entry!r}: cannot import module {module_name!r} ({exc}){where}"
        ) from exc
    fn: Any = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise TrainerImportError(f"trainer entry {entry!r}: module {module_name!r} has no attribute {attr!r}")
    if not callable(fn):
        raise TrainerImportError(f"trainer entry {entry!r} is not callable")
    _remember(entry, _module_root(module_name))
    return fn


def _check_entry(entry: str) -> None:
    module_name, sep, attr = entry.partition(":")
    if not sep or not module_name or not attr:
        raise TrainerImportError(f"trainer entry {entry!r} must look like 'package.module:function'")


def _remember(entry: str, *folders: str | None) -> None:
    known = list(_FOLDERS.get(entry, ()))
    known += [f for f in folders if f and f not in known]
    _FOLDERS[entry] = tuple(known)


def _module_root(module_name: str | None) -> str | None:
    """The folder on ``sys.path`` that ``module_name`` was imported from; None inside the Python installation."""
    module = sys.modules.get(module_name or "")
    file = getattr(module, "__file__", None)
    if not module_name or not file:
        return None
    return _root_of(module_name, str(file))


@functools.lru_cache(maxsize=256)
def _root_of(module_name: str, file: str) -> str | None:
    """:func:`_module_root` for a module's file (resolving paths costs a worker about a millisecond a trial)."""
    path = Path(file).resolve().parent
    depth = 0 if module_name == "__main__" else module_name.count(".") + (Path(file).name == "__init__.py")
    if depth > len(path.parents):
        return None  # a module registered under a name that does not match its file
    root = path.parents[depth - 1] if depth else path
    installed = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    if any(root == p or p in root.parents for p in installed):
        return None
    return str(root)


# --- what a trainer declares ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TrainerInfo:
    """What a trainer can do, as far as it says. ``None`` means unknown: any param, any metric.

    ``accepted_params``: the ``config.params`` names it understands (a spec searching
    another one is refused up front). ``reported_metrics``: the metric names it may
    report (a spec optimising or pruning on another one is refused). ``supports_pbt``:
    it honours ``schedule_epochs`` and ``inherit_checkpoint``, so population-based
    training can run it in segments.
    """

    accepted_params: frozenset[str] | None = None
    reported_metrics: frozenset[str] | None = None
    supports_pbt: bool = False

    def __post_init__(self) -> None:
        for name in ("accepted_params", "reported_metrics"):
            value = getattr(self, name)
            if value is not None:
                if isinstance(value, str) or not isinstance(value, Iterable):
                    raise TypeError(f"{name}={value!r}: must be a collection of names, or None")
                object.__setattr__(self, name, frozenset(str(v) for v in value))
        if not isinstance(self.supports_pbt, bool):
            raise TypeError(f"supports_pbt={self.supports_pbt!r}: must be True or False")

    def unknown_params(self, names: Iterable[str]) -> list[str]:
        """The ``names`` this trainer does not accept (none when it declares nothing)."""
        if self.accepted_params is None:
            return []
        return sorted(set(names) - self.accepted_params)


_INFO_ATTR = "__trainer_info__"
_LEGACY_ATTRS = ("accepted_params", "reported_metrics", "supports_pbt")  # attributes older trainers set on fit
F = TypeVar("F", bound=Callable[..., Any])


def declare(fn: F, info: TrainerInfo) -> F:
    """Record ``info`` as what ``fn`` can do, and return ``fn``.

    The older attributes (``fn.accepted_params``...) are set from it too, for code that still reads them.
    """
    setattr(fn, _INFO_ATTR, info)
    for name in _LEGACY_ATTRS:
        value = getattr(info, name)
        if value is not None:
            setattr(fn, name, value)
    return fn


def trainer(
    *,
    accepted_params: Iterable[str] | None = None,
    reported_metrics: Iterable[str] | None = None,
    supports_pbt: bool = False,
) -> Callable[[F], F]:
    """Decorator form of :func:`declare`: ``@trainer(accepted_params={"lr"}, reported_metrics={"val_loss"})``."""
    info = TrainerInfo(
        frozenset(accepted_params) if accepted_params is not None else None,
        frozenset(reported_metrics) if reported_metrics is not None else None,
        supports_pbt,
    )
    return lambda fn: declare(fn, info)


def capabilities_of(fn: Callable[..., Any]) -> TrainerInfo:
    """What ``fn`` declared; else what its older ``fn.accepted_params``-style attributes say; else unknown."""
    info = getattr(fn, _INFO_ATTR, None)
    if isinstance(info, TrainerInfo):
        return info
    accepted = getattr(fn, "accepted_params", None)
    reported = getattr(fn, "reported_metrics", None)
    return TrainerInfo(
        frozenset(accepted) if accepted is not None else None,
        frozenset(reported) if reported is not None else None,
        getattr(fn, "supports_pbt", False) is True,
    )
