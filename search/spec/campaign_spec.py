"""The study spec: a TOML file turned into frozen, validated dataclasses.

Every mistake a user can make in a spec is one :class:`SpecError` line naming
the file, the key and the rule (with the closest valid key for typos), raised
before anything is created on disk or started.

The trainer is imported (by name, with torch and whatever else it needs) only to check the spec
against what it declares (:mod:`search.spec.trainer_check`): ``load_spec(path)`` does, for ``run``,
``resume`` and ``check``; ``load_spec(path, check_trainer=False)`` reads the spec
alone, for commands that only look at a campaign (``status``, ``report``), and
:func:`~search.spec.trainer_check.check_trainer` runs the trainer checks later (``reproduce``).
The sections have their own modules: ``[cluster]``
(:mod:`search.spec.cluster`), ``[logging]`` (:mod:`search.spec.logs`), ``[pbt]`` (:mod:`search.spec.pbt`),
``[elastic]`` (:mod:`search.spec.elastic`), ``[scaling]`` (:mod:`search.spec.scaling`); the sampler names and their rules are the registry
in :mod:`search.sampling.samplers`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from search.sampling import components
from search.sampling.pruning import PRUNER_REGISTRY, PRUNERS, RESOURCE_METRIC
from search.sampling.samplers import (
    REPLICA_SAFE,
    SAMPLER_REGISTRY,
    SAMPLERS,
    SAMPLING,
    sampler_info,
    sampling_problem,
    space_problem,
)
from search.spec.budgets import BUDGET_KEYS, budget_fields
from search.spec.cluster import CLUSTER_KEYS, ClusterSpec, check_tls_files, parse_cluster
from search.spec.elastic import ElasticSpec, parse_elastic
from search.spec.enqueue import parse_enqueue
from search.spec.gpu import GPU_KEYS, gpu_fields
from search.spec.keys import BATCH_SIZE, DATA_PARALLEL
from search.spec.logs import LOGGING_KEYS, LoggingSpec, parse_logging
from search.spec.objective_spec import objective_space, objective_study
from search.spec.pbt import PBT_KEYS, PBTSpec, parse_pbt
from search.spec.reading import parse_toml, read_spec_text
from search.spec.scaling import OBJECTIVE, SCALING_KEYS, ScalingSpec, parse_scaling, sweep_space
from search.spec.schedulers import POLICY_REGISTRY
from search.spec.storage_url import storage_of
from search.spec.table import SpecError, SpecTable, _closest, _show
from search.vocab.terms import DIRECTIONS
from spaces.errors import SpaceError
from spaces.params import SearchSpace, parse_space

__all__ = [
    "SpecError",
    "StudySpec",
    "TrainerSpec",
    "ClusterSpec",
    "PrunerSpec",
    "CampaignSpec",
    "load_spec",
    "parse_spec",
    "SAMPLERS",
    "PRUNERS",
    "PRUNING_RESOURCES",
    "DATA_PARALLEL",
    "RESOURCE_METRIC",
    # re-exported from search.sampling.samplers, where they are defined:
    "REPLICA_SAFE",
    "SAMPLING",
    "sampling_problem",
]

PRUNING_RESOURCES = ("examples", "steps", "epochs")
DEVICES = ("auto", "cpu", "cuda")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
_ENTRY_RE = re.compile(rf"^{_DOTTED}:{_DOTTED}(\.<locals>\.{_DOTTED})*$")  # a function defined in a function too
# Bounds no campaign reaches and no machine holds: a value beyond one is a typo (10**23 trials), refused.
MAX_TRIALS = 10**6
MAX_EPOCHS = 10**6
MAX_WIDTH = 1024  # slots (GPUs or CPU cores) one data-parallel trial may take
MAX_COUNT = 10**4  # parallelism, retries, trials dispatched ahead or batched per task


@dataclasses.dataclass(frozen=True)
class StudySpec:
    name: str
    """Study name and campaign folder name: letters, digits, `_`, `-`, `.`. Required."""
    directions: tuple[str, ...]
    """TOML `direction` (one) or `directions` (a list): `"maximize"` or `"minimize"`, or a list of them for a
    multi-objective study. Required."""
    metrics: tuple[str, ...]
    """TOML `metric` (one) or `metrics` (a list): the reported metric(s) to optimise, one per direction. Required."""
    sampler: str = "tpe"
    """`tpe`, `random`, `cmaes`, `gp`, `qmc`, `grid` (discrete parameters only), `nsga2` (multi-objective), `evolution`,
    `cost_tpe` (TPE weighed by each trial's predicted cost, docs/howto/budgets.md), or any sampler class as
    `"package.module:Class"`; keyword arguments in `[sampler]`."""
    seed: int = 0
    """Seeds the sampler; each trial's seed derives from it and the trial number (below 2**32)."""
    n_trials: int = 20
    """The trial budget (finished trials of any state count); at most 10^6."""
    time_budget: float = 0.0
    """Seconds; after it no trial starts and running trials are stopped at their next report (recorded PRUNED with
    `stop_reason = "time budget"`); 0: none. A trial asked but never started ends PRUNED with `stop_reason = "time
    budget: never started"`. With it the longest predicted trial starts first, and none that is predicted to run past
    it (docs/howto/budgets.md)."""
    slot_hours: float = 0.0
    """A budget in slot-hours: the cluster's slots x hours of every trial run (pruned, failed and lost runs included;
    a resumed campaign's earlier trials too). A trial starts only while one more trial's predicted cost (the mean of
    the trials so far) fits in what is left after the running trials' predicted cost; the first trials start before
    any cost is known. 0: none. `status` shows spent and left."""
    gpu_hours: float = 0.0
    """The same budget in GPU-hours: a slot counts as `[trainer] gpus` GPUs (1/k when k trials share one). On a
    cluster of GPU slots only; not with `slot_hours`. 0: none."""
    trial_timeout: float = 0.0
    """Seconds from the moment a worker starts the trial; past it the trial is stopped at its next report (PRUNED,
    `stop_reason = "trial timeout"`); 0: none."""
    stop_grace: float = 60.0  # seconds a trial asked to stop by a time limit has to end before it is killed
    """Seconds a trial asked to stop by `time_budget` or `trial_timeout` has to end; past it (a hung trainer that never
    reports) its worker's processes are killed and restarted, and the trial is PRUNED (FAIL if it never reported) with
    `stop_reason = "trial timeout: killed after N s ..."`; other trials on that worker run again, not charged a
    retry."""
    storage: str = ""
    """`""` or `"journal"`: Optuna's journal file `study.journal` in the campaign folder (group commit); `"sqlite"`:
    SQLite `study.db` there (WAL mode); otherwise `journal:/abs/path`, `sqlite:////abs/path.db` or a database URL
    SQLAlchemy knows (`postgresql://...`); a relative or in-memory path, or an unknown scheme, is refused."""
    pruner: str = "none"
    """`none`, `median`, `percentile`, `asha` (successive halving), `hyperband`, or any pruner class as
    `"package.module:Class"`; options in `[pruner]`. Single-objective, non-deterministic studies only."""
    deterministic: bool = False
    """A deterministic campaign: trial k is sampled from trials 0..k-P-1 only (P = `parallelism`), told in number order;
    trainers use deterministic torch settings. Refuses pruning and a time budget."""
    scheduler: str = "none"
    """`"none"`, or `"pbt"`: population-based training, options in `[pbt]`."""
    dispatch_ahead: int = -1  # -1: automatic
    """TOML: an int or `"auto"` (-1 here). Tasks queued at the workers beyond the free slots, so a slot that frees
    restarts without waiting for the controller; `auto`: none until trial durations are known, then enough to cover 2 s
    of finishes, at most one per slot. When fewer are queued than there are slots, each waits at the worker whose
    running trial started first."""
    batch_trials: int = -1  # trials per task; -1: automatic
    """TOML: an int or `"auto"` (-1 here). Trials run one after another in one Dask task; `auto`: 1 for trials longer
    than 25 ms, else about 50 ms of trials per task (at most 32), so trivial trials are not dominated by task round
    trips. Each trial still reports, stops, fails and is told on its own."""
    sampling: str = "auto"
    """Where the sampler runs: `process` (a child process on a replica study; `tpe`, `gp` and sampler classes only),
    `thread` (a thread of the controller, used once asks take 50 ms), `inline` (the controller's loop); `auto`:
    `process` for `tpe`, `gp` and a sampler class that pickles, else `thread`; deterministic and PBT campaigns always
    `inline`."""
    parallelism: int = 4
    """Deterministic campaigns: trial k is sampled from trials 0..k-P-1 only."""
    max_retries: int = 2
    """Times a trial is re-run (from its checkpoint, same number and parameters) after its worker died; then FAIL."""
    fail_fast: int = 3
    """Stop the campaign (exit status 4) once this many trials have failed for one reason (the same exception class,
    else the same message) while none has completed or been pruned; the rest of the budget is not spent and trials in
    flight are kept for `resume`. Counted anew by each `run` or `resume`; 0: never stop early."""
    constraints: tuple[str, ...] = ()  # reported metrics that must be <= 0 for a feasible trial
    """Names of metrics the trainer reports (final metrics, or a stopped trial's last report) that must each be `<= 0`
    for a trial to be feasible; `tpe`, `gp` and `nsga2` only."""
    warm_start: str = ""  # an earlier campaign folder or Optuna storage URL[#study] whose trials seed the sampler
    """An earlier campaign folder or `"sqlite:///old.db#study"`: its finished trials feed the sampler; not with
    `[scaling]` or `[pbt]`."""

    @property
    def multi_objective(self) -> bool:
        return len(self.directions) > 1


@dataclasses.dataclass(frozen=True)
class TrainerSpec:
    entry: str = "trainers.classifier:fit"
    """The trainer, `module:function`; your own works the same way (`mypkg.train:fit`)."""
    dataset: str = "digits"
    """`digits` (scikit-learn's 8x8 handwritten digits, shipped in the package), `synthetic` or `mnist1d`
    (generated by the `mnist1d` package, `options.n_samples` examples; the built-in classifier)."""
    epochs: int = 10
    """Epochs per trial; at most 10^6."""
    device: str = "auto"
    """`auto` (CUDA when present), `cpu`, `cuda`."""
    checkpoint_every: int = 1
    """Epochs between checkpoints in `trials/<n>/`."""
    data_parallel: int = 1
    """Processes (GPUs) per trial, at most 1024; a `[space]` entry `data_parallel` overrides it per trial (fixed or
    searched). A trial wider than one worker's slots spans several workers (all or nothing)."""
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Fixed trainer settings, e.g. `{ data_seed = 0, torch_threads = 1 }`."""
    gpus: float = 1.0
    """GPUs per trial slot: an integer >= 1, or 1/k to pack k trials on one GPU (a fractional Dask ``GPU`` resource)."""
    gpu_memory: str = "none"
    """"auto": place later trials by the peak device memory similar trials used (within ``gpu_headroom``)."""
    gpu_headroom: float = 0.9
    """The fraction of a GPU's memory that the trials packed on it may be expected to use together."""
    oom_retry: str = "none"
    """"accumulate": the built-in trainer re-runs an out-of-memory trial once at half the micro-batch."""
    objective: bool = False
    """`true`: `entry` is an Optuna objective, `objective(trial)`, not a trainer: it suggests its own parameters as it
    runs (define-by-run, each suggestion answered by the controller), so `[space]` stays empty; `search.optimize` writes
    it. Not with `deterministic`, `[pbt]`, `[scaling]` or `data_parallel`."""


@dataclasses.dataclass(frozen=True)
class PrunerSpec:
    """Controller-side early stopping; ``resource`` is what a rung counts."""

    resource: str = "epochs"  # the report's epoch (else its step): optuna-dashboard's x axis
    """What a rung counts, and the step of each intermediate value (optuna-dashboard's x axis): `epochs` (the report's
    `epoch` metric, else its step), `examples` seen (fair for trials that report at different fractions of an epoch), or
    optimizer `steps`."""
    n_startup_trials: int = 4
    """median/percentile: trials before any pruning."""
    n_warmup_steps: int = 0
    """median/percentile: resource before a trial may be pruned."""
    percentile: float = 25.0
    """The percentile pruner's percentile, in (0, 100)."""
    min_resource: int = 0
    """The first rung (asha, hyperband), in `resource` units; 0: the resource of the first report (one epoch's
    worth)."""
    reduction_factor: int = 3
    """asha/hyperband; must be >= 2."""
    max_resource: int = 0
    """hyperband's maximum; 0: inferred."""
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # a pruner class's keyword arguments
    """A pruner class's keyword arguments: every `[pruner]` key but `resource` when `[study] pruner` names a class."""


@dataclasses.dataclass(frozen=True)
class CampaignSpec:
    study: StudySpec
    """`[study]`."""
    trainer: TrainerSpec
    """`[trainer]`."""
    space: SearchSpace
    """`[space]`: the search space, one entry per parameter (see the spec guide)."""
    cluster: ClusterSpec
    """`[cluster]`."""
    pruning: PrunerSpec
    """`[pruner]`."""
    source: str
    """Where the spec was read from (the file's path), named in every error message."""
    text: str
    """The spec's TOML text, frozen as the campaign's `spec.toml`; its sha256 is a study user attribute."""
    scaling: ScalingSpec | None = None
    """`[scaling]`: a batch-size scaling sweep, or None."""
    pbt: PBTSpec | None = None
    """`[pbt]`: population-based training (with `[study] scheduler = "pbt"`), or None."""
    enqueue: tuple[dict[str, Any], ...] = ()  # ``[[enqueue]]``: configurations run first, flat parameter names
    """`[[enqueue]]` tables: configurations run first, flat parameter names to values."""
    logging: LoggingSpec = dataclasses.field(default_factory=LoggingSpec)  # ``[logging]``: TensorBoard, MLflow
    """`[logging]`: TensorBoard, MLflow, Weights & Biases."""
    sampler_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # ``[sampler]``: keyword arguments
    """`[sampler]`: the sampler's keyword arguments."""
    elastic: ElasticSpec | None = None
    """`[elastic]`: trials that grow (or shrink) their width between segments (docs/howto/elastic.md), or None."""

    @property
    def objective_metrics(self) -> tuple[str, ...]:
        """What the study optimises: the spec's metrics, or steps to target in a scaling sweep."""
        return (OBJECTIVE,) if self.scaling else self.study.metrics

    @property
    def objective_directions(self) -> tuple[str, ...]:
        return ("minimize",) if self.scaling else self.study.directions

    def widths(self) -> tuple[int, ...]:
        """Every data-parallel width a trial of this campaign may have."""
        return _values_of(self.space, DATA_PARALLEL) or (self.trainer.data_parallel,)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


# --- sections --------------------------------------------------------------------------------

_TOP = ("study", "trainer", "space", "cluster", "pruner", "sampler", "scaling", "pbt", "elastic", "enqueue", "logging")
_STUDY = (  # the [study] keys
    *"name direction directions metric metrics sampler seed n_trials time_budget trial_timeout stop_grace".split(),
    *"storage pruner deterministic parallelism max_retries fail_fast scheduler dispatch_ahead batch_trials".split(),
    *"sampling constraints warm_start".split(),
    *BUDGET_KEYS,
)
_TRAINER = (
    "entry",
    "dataset",
    "epochs",
    "device",
    "checkpoint_every",
    "data_parallel",
    "options",
    "objective",
    *GPU_KEYS,
)
_PRUNER = (
    "resource",
    "n_startup_trials",
    "n_warmup_steps",
    "percentile",
    "min_resource",
    "reduction_factor",
    "max_resource",
)


def _str_list(t: SpecTable, one: str, many: str, choices: tuple[str, ...] | None = None) -> tuple[str, ...]:
    if t.has(one) and t.has(many):
        raise t.error(many, f"give either {one!r} or {many!r}, not both")
    if t.has(many):
        values = t.data[many]
        if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
            raise t.error(many, f"must be a non-empty list of strings, got {_show(values)}")
        items = tuple(values)
    else:
        items = (t.choice(one, choices) if choices else t.str(one),)
    for item in items:
        if choices and item not in choices:
            raise t.error(many, f"{item!r} is not one of {', '.join(choices)}{_closest(item, choices)}")
    return items


def _study(t: SpecTable) -> StudySpec:
    name = t.str("name")
    if not _NAME_RE.match(name) or ".." in name:
        raise t.error(
            "name", f"{name!r} must be 1-100 letters, digits, '_', '-' or '.', starting with a letter or digit"
        )
    directions = _str_list(t, "direction", "directions", DIRECTIONS)
    metrics = _str_list(t, "metric", "metrics")
    if len(metrics) != len(directions):
        raise t.error("metrics", f"{len(metrics)} metric(s) for {len(directions)} direction(s): give one per direction")
    sampler = _component(t, "sampler", SAMPLER_REGISTRY.names(), "tpe")
    pruner = _component(t, "pruner", PRUNER_REGISTRY.names(), "none")
    if pruner != "none" and len(directions) > 1:
        raise t.error("pruner", f"{pruner!r} prunes on one objective; a multi-objective study must use 'none'")
    if t.data.get("deterministic") and pruner != "none":
        raise t.error("pruner", "a deterministic campaign cannot prune: pruning decisions depend on timing")
    if t.data.get("deterministic") and t.data.get("time_budget"):
        raise t.error("time_budget", "a deterministic campaign cannot have a time budget: it depends on timing")
    for key in ("slot_hours", "gpu_hours"):
        if t.data.get("deterministic") and t.data.get(key):
            raise t.error(
                key, "a deterministic campaign cannot have a resource budget: what it spends depends on timing"
            )
    if t.data.get("slot_hours") and t.data.get("gpu_hours"):
        raise t.error("gpu_hours", "give a budget in slot_hours or in gpu_hours, not both")
    sampling = _sampling(t, sampler)
    seed = t.int("seed", 0, minimum=0)
    if seed >= 2**32:
        raise t.error("seed", f"must be < 2**32, got {seed}")
    return StudySpec(
        name=name,
        directions=directions,
        metrics=metrics,
        sampler=sampler,
        seed=seed,
        n_trials=t.int("n_trials", 20, minimum=1, maximum=MAX_TRIALS),
        time_budget=t.float("time_budget", 0.0, minimum=0.0),
        **budget_fields(t),
        trial_timeout=t.float("trial_timeout", 0.0, minimum=0.0),
        stop_grace=t.float("stop_grace", 60.0, minimum=0.0),
        storage=storage_of(t),
        pruner=pruner,
        deterministic=t.bool("deterministic", False),
        parallelism=t.int("parallelism", 4, minimum=1, maximum=MAX_COUNT),
        scheduler=t.choice("scheduler", POLICY_REGISTRY.names(), "none"),
        dispatch_ahead=_auto_int(t, "dispatch_ahead", 0),
        batch_trials=_auto_int(t, "batch_trials", 1),
        sampling=sampling,
        max_retries=t.int("max_retries", 2, minimum=0, maximum=MAX_COUNT),
        fail_fast=t.int("fail_fast", 3, minimum=0, maximum=MAX_TRIALS),
        constraints=_constraints(t, sampler),
        warm_start=t.str("warm_start", ""),
    )


def _constraints(t: SpecTable, sampler: str) -> tuple[str, ...]:
    """Reported metrics that must each be <= 0 for a trial to be feasible; only samplers that use them."""
    names = t.data.get("constraints", [])
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise t.error("constraints", f"must be a list of reported metric names, got {_show(names)}")
    for i, name in enumerate(names):
        if name in names[:i]:
            raise t.error("constraints", f"{name!r} is listed twice")
    if names and not sampler_info(sampler).supports_constraints:
        constrained = [name for name, info in SAMPLER_REGISTRY.items() if info.supports_constraints]
        raise t.error("constraints", f"sampler {sampler!r} ignores constraints; use {', '.join(constrained)}")
    return tuple(names)


def _component(t: SpecTable, key: str, names: tuple[str, ...], default: str) -> str:
    """A built-in sampler or pruner name, or a ``package.module:Class`` entry."""
    value = t.str(key, default)
    if components.is_entry(value):
        if not components.ENTRY_RE.match(value):
            raise t.error(key, f"{value!r} must be a built-in name or 'package.module:Class'")
        return value
    return t.choice(key, names, default)


def _sampling(t: SpecTable, sampler: str) -> str:
    """Where the sampler runs (see :func:`sampling_problem`)."""
    sampling = t.choice("sampling", SAMPLING, "auto")
    ordered = bool(t.data.get("deterministic")) or t.data.get("scheduler") == "pbt"
    problem = sampling_problem(sampling, sampler, ordered)
    if problem:
        raise t.error("sampling", problem)
    return sampling


def _auto_int(t: SpecTable, key: str, minimum: int) -> int:
    """``"auto"`` (-1) or an integer >= ``minimum``."""
    value = t.data.get(key, "auto")
    if value == "auto":
        return -1
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_COUNT:
        raise t.error(key, f'must be "auto" or an integer from {minimum} to {MAX_COUNT:,}, got {_show(value)}')
    return value


def _trainer(t: SpecTable) -> TrainerSpec:
    options = t.table("options")
    for key, value in options.items():
        if not isinstance(value, (str, int, float, bool, list)):
            raise t.error(f"options.{key}", f"must be a string, number, boolean or list, got {_show(value)}")
    entry = t.str("entry", "trainers.classifier:fit")
    if not _ENTRY_RE.match(entry):
        raise t.error("entry", f"{entry!r} must look like 'package.module:function' (dotted Python names)")
    return TrainerSpec(
        entry=entry,
        dataset=t.str("dataset", "digits"),
        epochs=t.int("epochs", 10, minimum=1, maximum=MAX_EPOCHS),
        device=t.choice("device", DEVICES, "auto"),
        checkpoint_every=t.int("checkpoint_every", 1, minimum=1, maximum=MAX_EPOCHS),
        data_parallel=t.int("data_parallel", 1, minimum=1, maximum=MAX_WIDTH),
        options=dict(options),
        objective=t.bool("objective", False),
        **gpu_fields(t),
    )


def _pruning(source: str, data: Mapping[str, Any], pruner: str) -> PrunerSpec:
    """``[pruner]``: the built-in pruners' settings, or (a pruner class) ``resource`` and its keyword arguments."""
    if components.is_entry(pruner):
        options = dict(data) if isinstance(data, Mapping) else data
        t = SpecTable(source, "pruner", {k: v for k, v in options.items() if k == "resource"}, _PRUNER)
        return PrunerSpec(
            resource=t.choice("resource", PRUNING_RESOURCES, "epochs"),
            options={k: v for k, v in options.items() if k != "resource"},
        )
    t = SpecTable(source, "pruner", data, _PRUNER)
    spec = PrunerSpec(
        resource=t.choice("resource", PRUNING_RESOURCES, "epochs"),
        n_startup_trials=t.int("n_startup_trials", 4, minimum=0),
        n_warmup_steps=t.int("n_warmup_steps", 0, minimum=0),
        percentile=t.float("percentile", 25.0, minimum=0.0),
        min_resource=t.int("min_resource", 0, minimum=0),
        reduction_factor=t.int("reduction_factor", 3),
        max_resource=t.int("max_resource", 0, minimum=0),
    )
    if spec.reduction_factor < 2:
        raise t.error("reduction_factor", f"must be >= 2, got {spec.reduction_factor}")
    if not 0.0 < spec.percentile < 100.0:
        raise t.error("percentile", f"must be in (0, 100), got {spec.percentile:g}")
    return spec


def _space(source: str, data: Any) -> SearchSpace:
    if not isinstance(data, Mapping) or not data:
        raise SpecError(source, "space", "must be a table with at least one parameter")
    try:
        return parse_space(data)
    except SpaceError as exc:
        raise SpecError(source, f"space.{exc.key}", exc.problem) from None


def parse_spec(
    data: Mapping[str, Any], source: str = "<spec>", text: str = "", check_trainer: bool = True
) -> CampaignSpec:
    """Validate a parsed TOML document; raise :class:`SpecError` on the first mistake.

    ``check_trainer=False``: do not import the trainer; see :func:`~search.spec.trainer_check.check_trainer`.
    """
    top = SpecTable(source, "", data, _TOP)
    if "study" not in data:
        raise SpecError(source, "study", "section [study] is required")
    study = _study(SpecTable(source, "study", top.table("study"), _STUDY))
    trainer = _trainer(SpecTable(source, "trainer", top.table("trainer"), _TRAINER))
    pruning = _pruning(source, top.table("pruner"), study.pruner)
    sampler_options = dict(top.table("sampler"))
    cluster = parse_cluster(SpecTable(source, "cluster", top.table("cluster"), CLUSTER_KEYS))
    if trainer.objective:
        study, space = objective_study(source, data, study, trainer), objective_space(source, data.get("space"))
    else:
        space = _space(source, data.get("space"))
    scaling = None
    if "scaling" in data:
        scaling = parse_scaling(SpecTable(source, "scaling", top.table("scaling"), SCALING_KEYS), trainer.epochs)
        study, space = _scaling_study(source, top, study, space, scaling)
    problem = space_problem(study.sampler, space, len(study.directions))
    if problem:
        raise SpecError(source, *problem)
    _check_data_parallel(source, space, trainer)
    pbt = _pbt(source, top, study, trainer, space)
    elastic = parse_elastic(source, data, study, trainer, DATA_PARALLEL in space, _values_of(space, BATCH_SIZE))
    if study.warm_start and (scaling or pbt):
        what = "a [scaling] sweep" if scaling else "population-based training ([pbt])"
        raise SpecError(source, "study.warm_start", f"{what} cannot start warm; remove warm_start")
    enqueue = parse_enqueue(source, "enqueue", data["enqueue"], space, study.n_trials) if "enqueue" in data else ()
    logs = parse_logging(SpecTable(source, "logging", top.table("logging"), LOGGING_KEYS), check_trainer)
    spec = CampaignSpec(
        study,
        trainer,
        space,
        cluster,
        pruning,
        source,
        text,
        scaling,
        pbt,
        enqueue,
        logging=logs,
        sampler_options=sampler_options,
        elastic=elastic,
    )
    if not check_trainer:
        return spec
    check_tls_files(source, cluster)
    from search.spec.component_check import check_components  # it imports this module

    check_components(spec)
    from search.spec import trainer_check  # it imports this module: the trainer checks need a CampaignSpec

    return trainer_check.check_trainer(spec)


def _values_of(space: SearchSpace, name: str) -> tuple[int, ...]:
    """The integer values a parameter may take (empty if absent or a continuous range)."""
    if name not in space:
        return ()
    param = space[name]
    dists = param.distributions()
    if not dists:
        return (int(param.value),)  # type: ignore[attr-defined]
    dist = dists[name]
    from optuna.distributions import CategoricalDistribution, IntDistribution

    if isinstance(dist, CategoricalDistribution):
        return tuple(int(c) for c in dist.choices if isinstance(c, int) and not isinstance(c, bool))
    if isinstance(dist, IntDistribution):
        return tuple(range(dist.low, dist.high + 1, dist.step))
    return ()


def _check_data_parallel(source: str, space: SearchSpace, trainer: TrainerSpec) -> None:
    if DATA_PARALLEL in space:
        widths = _values_of(space, DATA_PARALLEL)
        if not widths or min(widths) < 1:
            raise SpecError(source, f"space.{DATA_PARALLEL}", "must be a positive integer, fixed or int/categorical")
    else:
        widths = (trainer.data_parallel,)
    for batch in _values_of(space, BATCH_SIZE):
        for k in widths:
            if batch % k:
                raise SpecError(
                    source,
                    f"space.{BATCH_SIZE}",
                    f"global batch {batch} is not divisible by data_parallel = {k}: each of the k replicas takes B/k",
                )


def _scaling_study(
    source: str, top: SpecTable, study: StudySpec, space: SearchSpace, scaling: ScalingSpec
) -> tuple[StudySpec, SearchSpace]:
    """A sweep owns the batch size and the trial budget, and optimises steps to target."""
    if BATCH_SIZE in space:
        raise SpecError(
            source, f"space.{BATCH_SIZE}", "the [scaling] sweep sets the batch size; remove it from [space]"
        )
    if study.multi_objective:
        raise SpecError(source, "study.directions", "a scaling sweep has one target metric")
    if study.pruner != "none":
        raise SpecError(source, "study.pruner", "a scaling sweep runs each trial to its target; use 'none'")
    given = top.table("study").get("n_trials")
    if given is not None and given != scaling.n_trials:
        raise SpecError(
            source,
            "study.n_trials",
            f"{given} does not match [scaling]: trials per batch size x batch sizes = {scaling.n_trials}; leave it out",
        )
    return dataclasses.replace(study, n_trials=scaling.n_trials), sweep_space(source, scaling, space)


def _pbt(source: str, top: SpecTable, study: StudySpec, trainer: TrainerSpec, space: SearchSpace) -> PBTSpec | None:
    if study.scheduler != "pbt":
        if "pbt" in top.data:
            raise SpecError(source, "pbt", "a [pbt] section needs [study] scheduler = 'pbt'")
        return None
    if "pbt" not in top.data:
        raise SpecError(source, "pbt", "scheduler 'pbt' needs a [pbt] section with at least interval = N (epochs)")
    for key, rule in (("pruner", "none"), ("deterministic", False)):
        if getattr(study, key) != rule:
            raise SpecError(source, f"study.{key}", f"population-based training needs {key} = {rule!r}")
    if study.multi_objective:
        raise SpecError(source, "study.directions", "population-based training ranks members on one metric")
    return parse_pbt(
        SpecTable(source, "pbt", top.table("pbt"), PBT_KEYS),
        trainer.epochs,
        trainer.checkpoint_every,
        space.base_distributions(),  # a conditional parameter is not in every member
    )


def load_spec(path: str | Path, check_trainer: bool = True) -> CampaignSpec:
    """Read and validate a spec file; ``check_trainer=False``: without importing the trainer."""
    source = str(path)
    text = read_spec_text(path)  # a regular file, at most MAX_SPEC_BYTES, UTF-8
    return parse_spec(parse_toml(source, text), source, text, check_trainer)
