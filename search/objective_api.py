"""``search.optimize(objective, n_trials=...)``: an Optuna objective, unchanged, run on the cluster's workers.

```python
import optuna
import search


def objective(trial):
    x = trial.suggest_float("x", -10, 10)
    return (x - 2) ** 2


result = search.optimize(objective, n_trials=20, n_workers=2)  # as study.optimize(objective, n_trials=20)
result.best_params, result.best_value, result.study
```

The objective is Optuna's define-by-run function: ``suggest_*`` (conditional parameters too), ``report`` and
``should_prune`` (the controller's pruner), ``set_user_attr``, ``raise optuna.TrialPruned()``, a number returned (a
tuple for ``directions=[...]``). Each suggestion is a round trip to the controller, whose sampler picks the value and
which alone writes the study (:mod:`search.objective`). The campaign is an ordinary one (``runs_dir/<study_name>/``,
``[trainer] objective = true`` in its frozen spec): ``hypersweep status``, ``report``, ``resume`` and ``reproduce``
(which replays the trial's recorded suggestions) work on it, and ``trial.checkpoint_dir`` is the trial's folder.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spaces.errors import InputError

if TYPE_CHECKING:
    import optuna

    from search.api import Result
    from search.loop.hooks import Callback

__all__ = ["optimize", "metric_names_for"]

_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def optimize(
    objective: Callable[[Any], Any],
    n_trials: int = 20,
    *,
    timeout: float | None = None,
    study_name: str | None = None,
    direction: str | None = None,
    directions: Sequence[str] | None = None,
    metric_names: Sequence[str] | None = None,
    sampler: str | optuna.samplers.BaseSampler | None = None,
    pruner: str | optuna.pruners.BasePruner | None = None,
    seed: int = 0,
    storage: str = "",
    gpus: float | None = None,
    runs_dir: str | Path = "runs",
    n_workers: int | None = None,
    scheduler: str | None = None,
    progress: bool = True,
    callbacks: Sequence[Callback] = (),
    exist_ok: str = "error",
) -> Result:
    """Run ``objective(trial)`` ``n_trials`` times on the cluster's workers (as Optuna's ``study.optimize``) and
    return the campaign (:class:`search.Result`: ``.study``, ``.best_params``, ``.best_value``, ``.trials``).

    ``timeout``: seconds after which no trial starts (``[study] time_budget``). ``study_name``: the campaign folder's
    name in ``runs_dir`` (default: the objective's name). ``direction`` (``"minimize"``, the default, or
    ``"maximize"``) or ``directions`` (multi-objective: the objective returns a tuple). ``metric_names``: what the
    values are called in the campaign's tables (default ``value``, or ``values_0``, ``values_1``, ...). ``sampler`` /
    ``pruner``: a built-in name (``"tpe"``, ``"median"``, ...) or any Optuna object. ``seed``: the study seed.
    ``storage``: ``[study] storage`` (the campaign's journal by default). ``gpus``: GPUs per trial (``[trainer]
    gpus``; 0.5 packs two trials on one GPU). ``runs_dir``, ``n_workers``, ``scheduler``, ``progress``, ``callbacks``
    and ``exist_ok``: as :func:`search.run`.
    """
    from search.api import run
    from search.objective.trainer import ObjectiveTrainer

    study = _study_table(objective, n_trials, timeout, study_name, direction, directions, metric_names, seed, storage)
    if isinstance(sampler, str):
        study["sampler"], sampler = sampler, None  # a built-in name goes into the spec, an object to search.run
    if isinstance(pruner, str):
        study["pruner"], pruner = pruner, None
    trainer: dict[str, Any] = {"objective": True}
    if gpus is not None:
        trainer["gpus"] = gpus
    wrapped = ObjectiveTrainer(objective, study.get("metrics") or [study["metric"]])
    return run(
        {"study": study, "trainer": trainer},
        wrapped,
        runs_dir=runs_dir,
        n_workers=n_workers,
        scheduler=scheduler,
        progress=progress,
        sampler=sampler,
        pruner=pruner,
        callbacks=callbacks,
        exist_ok=exist_ok,
    )


def metric_names_for(count: int) -> list[str]:
    """Optuna's names for an objective's values: ``value``, or ``values_0``, ``values_1``, ... (its data frames')."""
    return ["value"] if count == 1 else [f"values_{i}" for i in range(count)]


def _study_table(
    objective: Callable[[Any], Any],
    n_trials: int,
    timeout: float | None,
    study_name: str | None,
    direction: str | None,
    directions: Sequence[str] | None,
    metric_names: Sequence[str] | None,
    seed: int,
    storage: str,
) -> dict[str, Any]:
    """The spec's ``[study]`` table from :func:`optimize`'s arguments, each checked with a one-line error."""
    if not callable(objective):
        raise InputError(f"objective={objective!r}: must be a function objective(trial)")
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise InputError(f"n_trials={n_trials!r}: must be an int >= 1")
    if timeout is not None and not timeout > 0:
        raise InputError(f"timeout={timeout!r}: must be a number of seconds > 0 (or None)")
    if direction is not None and directions is not None:
        raise InputError("give either direction= or directions=, not both")
    words = [str(getattr(d, "name", d)).lower() for d in (directions or [direction or "minimize"])]
    names = list(metric_names) if metric_names is not None else metric_names_for(len(words))
    if len(names) != len(words):
        raise InputError(f"metric_names={names!r}: one name per direction ({len(words)})")
    name = study_name or str(getattr(objective, "__name__", "objective"))
    if study_name is None and not _NAME.match(name):
        name = "objective"  # a lambda's "<lambda>"
    table: dict[str, Any] = {"name": name, "n_trials": n_trials, "seed": seed}
    if len(words) == 1:
        table.update(direction=words[0], metric=names[0])
    else:
        table.update(directions=words, metrics=names)
    if timeout is not None:
        table["time_budget"] = float(timeout)
    if storage:
        table["storage"] = storage
    return table
