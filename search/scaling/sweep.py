"""Batch-size scaling sweeps: one inner search per batch size, all sharing the cluster.

A spec with a ``[scaling]`` section runs one Optuna study whose trials take the
batch sizes in turn (trial n gets ``batch_sizes[n % len]``). A
:class:`ScalingSampler` gives every batch size its own seeded inner sampler
that only sees the trials of that batch size, so each is an independent search
over the learning rate (and warmup, momentum...) with its own budget, while all
of them share the slots. The objective is the number of optimizer steps to reach
the target; a trial stops as soon as it reaches it. At the end
:func:`analyze_sweep` fits McCandlish et al. (2018), classifies the regimes of
Shallue et al. (2018), fits the learning-rate rule, and writes the table, plots
and a plain-language conclusion into ``runs/<study>/scaling/``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, FloatDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from search.compat import optuna_private as op
from search.sampling.seeds import component_seed
from search.scaling.fit import (
    ScalingFit,
    TrialOutcome,
    bootstrap_b_crit,
    classify_regimes,
    conclusion,
    fit_mccandlish,
    lr_rule_fit,
    reached_points,
    scaling_table,
    write_scaling_table,
)
from search.scaling.forced_rule import ForcedRule, forced_rule
from search.scaling.target import TargetGoal, steps_to_target  # TargetGoal re-exported: status imports it without scipy

# Re-exported: the [scaling] section is parsed in search.spec.
from search.spec.scaling import BATCH, LR, OBJECTIVE, SCALING_KEYS, ScalingSpec, parse_scaling, with_batch_sizes
from search.store.records import TrialRecord
from spaces.batch import LRScaling

__all__ = [
    "ScalingSpec",
    "SCALING_KEYS",
    "parse_scaling",
    "ScalingSampler",
    "TargetGoal",
    "OBJECTIVE",
    "with_batch_sizes",
    "analyze_sweep",
    "SweepResult",
]

# --- the sampler ----------------------------------------------------------------------------


class _BatchView:
    """A study as one batch size's inner sampler sees it: only that batch size's trials."""

    def __init__(self, study: Study, batch_size: int) -> None:
        self._study = study
        self._batch_size = batch_size

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _keep(self, trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
        return [t for t in trials if t.params.get(BATCH) == self._batch_size]

    def get_trials(self, deepcopy: bool = True, states: Any = None) -> list[FrozenTrial]:
        return self._keep(self._study.get_trials(deepcopy=deepcopy, states=states))

    def _get_trials(self, deepcopy: bool = True, states: Any = None, use_cache: bool = False) -> list[FrozenTrial]:
        return self._keep(op.get_trials(self._study, deepcopy=deepcopy, states=states, use_cache=use_cache))

    @property
    def trials(self) -> list[FrozenTrial]:
        return self.get_trials()


class ScalingSampler(BaseSampler):
    """Round-robin batch sizes; an independent seeded inner sampler per batch size."""

    def __init__(self, batch_sizes: Sequence[int], make_inner: Callable[[int], BaseSampler]) -> None:
        if not batch_sizes:
            raise ValueError("batch_sizes must not be empty")
        self._sizes = tuple(int(b) for b in batch_sizes)
        self._inner = {b: make_inner(b) for b in self._sizes}

    def batch_size_of(self, number: int) -> int:
        return self._sizes[number % len(self._sizes)]

    def _pick(self, study: Study, trial: FrozenTrial) -> tuple[BaseSampler, _BatchView]:
        fixed = trial.system_attrs.get("fixed_params") or {}  # an enqueued trial (an lr_grid round) names its own
        b = int(fixed[BATCH]) if BATCH in fixed else self.batch_size_of(trial.number)
        return self._inner[b], _BatchView(study, b)

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        inner, view = self._pick(study, trial)
        space = inner.infer_relative_search_space(view, trial)  # type: ignore[arg-type]
        return {k: v for k, v in space.items() if k != BATCH}

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        inner, view = self._pick(study, trial)
        return inner.sample_relative(view, trial, search_space)  # type: ignore[arg-type]

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        if param_name == BATCH:
            return self.batch_size_of(trial.number)
        inner, view = self._pick(study, trial)
        return inner.sample_independent(view, trial, param_name, param_distribution)  # type: ignore[arg-type]

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        inner, view = self._pick(study, trial)
        inner.before_trial(view, trial)  # type: ignore[arg-type]

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None) -> None:
        inner, view = self._pick(study, trial)
        inner.after_trial(view, trial, state, values)  # type: ignore[arg-type]

    def reseed_rng(self) -> None:
        for inner in self._inner.values():
            inner.reseed_rng()


def scaling_sampler(sizes: Sequence[int], study_seed: int, inner: Callable[[int], BaseSampler]) -> ScalingSampler:
    """The sweep's sampler; ``inner(seed)`` builds one batch size's sampler from its own seed."""
    return ScalingSampler(sizes, lambda b: inner(component_seed(study_seed, f"scaling-{b}")))


# --- the analysis ---------------------------------------------------------------------------

CI = 0.9  # the level of the B_crit and LR-exponent intervals


@dataclasses.dataclass(frozen=True)
class SweepResult:
    folder: Path
    table_path: Path
    plots: tuple[Path, ...]
    conclusion: str


def _history(trial: FrozenTrial) -> list[tuple[int, dict[str, float]]]:
    return [(step, dict(metrics)) for step, metrics in TrialRecord.of(trial).history]


def _outcomes(study: optuna.Study, goal: TargetGoal) -> list[TrialOutcome]:
    outcomes = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        history = _history(trial) if trial.state == TrialState.COMPLETE else []  # stopped short: not reached
        hit = (
            steps_to_target(
                history,
                goal.metric,
                goal.target,
                goal.mode,
                time_key="epoch_seconds",
                interpolate=goal.interpolate,
            )
            if history
            else None
        )
        outcomes.append(TrialOutcome(int(trial.params[BATCH]), _trained_lr(_trainer_params(trial)), hit, trial.number))
    return outcomes


def _trainer_params(trial: FrozenTrial) -> dict[str, Any]:
    """The parameters the trainer got: the space's fixed values (``lr_scaling``, ``base_batch_size``: never sampled,
    so not in ``trial.params``) from its recorded config, with the sampled ones."""
    config = TrialRecord.of(trial).config or {}
    fixed = config.get("params")
    return {**(fixed if isinstance(fixed, Mapping) else {}), **trial.params}


def _trained_lr(params: Mapping[str, Any]) -> float | None:
    """The learning rate the trial trained with: ``lr``, scaled to its batch size by ``lr_scaling`` when set."""
    lr = params.get("lr")
    if lr is None:
        return None
    return LRScaling.of_params(params)(float(lr), int(params[BATCH]))


def _forced(study: optuna.Study) -> ForcedRule | None:
    """The rule every finished trial's rate was scaled by, if the design forced one on the exponent."""
    finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
    return forced_rule((_trainer_params(t), t.distributions) for t in finished)


def _tuned(study: optuna.Study, spec: ScalingSpec, goal: TargetGoal) -> str:
    """With an ``lr_grid``: how the rate was tuned at each batch size and where its window widened ("" without)."""
    if not spec.lr_grid:
        return ""
    from search.scaling.lr_grid import bracket_sentence, brackets_of

    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL))
    searched = next(
        (t.distributions.get(LR) for t in trials if isinstance(t.distributions.get(LR), FloatDistribution)), None
    )
    if not isinstance(searched, FloatDistribution):
        return ""
    brackets = brackets_of(trials, spec, goal, float(searched.low), float(searched.high))
    fixed = _trainer_params(trials[0])
    scaled = LRScaling.of_params(fixed)
    return bracket_sentence(brackets, spec, scaled.rule, lambda lr, b: scaled(lr, b)) if brackets else ""


def _grid_points(study: optuna.Study, goal: TargetGoal) -> list[Any]:
    """An ``lr_grid`` sweep's trials for :func:`~search.scaling.grid_plot.plot_lr_grid` (stopped ones too)."""
    from search.scaling.grid_plot import GridPoint

    points = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        history, lr = _history(trial), _trained_lr(_trainer_params(trial))
        if not history or lr is None:
            continue
        hit = steps_to_target(history, goal.metric, goal.target, goal.mode, interpolate=goal.interpolate)
        ran = float(history[-1][1].get("steps", math.nan))
        points.append(GridPoint(int(trial.params[BATCH]), lr, hit.steps if hit else ran, hit is not None))
    return points


def _noise_reading(step: float, metrics: Mapping[str, float]) -> tuple[float, float, float, float] | None:
    """A report's ``(step, b_simple, low, high)``; above the measurable range ``(step, inf, low, inf)``."""
    low = float(metrics.get("b_simple_lo", math.nan))
    if metrics.get("b_simple_above_range") == 1.0:
        return (step, math.inf, low, math.inf)
    if "b_simple" not in metrics or not math.isfinite(metrics["b_simple"]):
        return None
    return (step, float(metrics["b_simple"]), low, float(metrics.get("b_simple_hi", math.nan)))


def _noise_histories(
    study: optuna.Study, best_trials: Mapping[int, int]
) -> dict[int, list[tuple[float, float, float, float]]]:
    histories: dict[int, list[tuple[float, float, float, float]]] = {}
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    for b, number in best_trials.items():
        readings = [_noise_reading(float(m.get("steps", s)), m) for s, m in _history(by_number[number])]
        points = [r for r in readings if r is not None]
        if points:
            histories[b] = points
    return histories


def _against_b_crit(
    noise: Mapping[int, Sequence[tuple[float, float, float, float]]],
    fit: ScalingFit,
    interval: tuple[float, float],
    text: str,
    out: Path,
) -> tuple[str, list[Path]]:
    """The conclusion with the noise scale set against ``B_crit`` (:mod:`search.scaling.noise_check`), and its figure."""
    from search.scaling.noise_check import noise_prediction
    from search.scaling.noise_plot import plot_noise_vs_b_crit

    prediction = noise_prediction(noise, fit.b_crit, interval, ci=CI)
    if prediction is None:
        return text, []
    return f"{text} {prediction.sentence()}", [plot_noise_vs_b_crit(out / "noise_vs_b_crit.png", prediction)]


def analyze_sweep(study: optuna.Study, spec: ScalingSpec, goal: TargetGoal, out: Path, seed: int) -> SweepResult:
    """Fit, classify and plot the sweep's results into ``out`` (table, PNGs, conclusion.txt)."""
    from search.scaling.plots import plot_examples_to_target, plot_lr_rule, plot_noise_scale, plot_steps_to_target

    out.mkdir(parents=True, exist_ok=True)
    outcomes = _outcomes(study, goal)
    table = scaling_table(outcomes, spec.batch_sizes)
    sizes, steps = reached_points(table)
    not_reached = [int(b) for b in table[table["status"] != "reached"]["batch_size"]]
    plots: list[Path] = []
    if len(set(sizes)) < 3:
        text = (
            f"Only {len(sizes)} batch size(s) reached {goal.metric} {goal.comparison} "
            f"{goal.target:g} ({sizes}); a fit needs 3. Not reached: {not_reached}."
        )
    else:
        fit = fit_mccandlish(sizes, steps)
        regimes = classify_regimes(fit, sizes)
        table = scaling_table(outcomes, spec.batch_sizes, fit=fit, regimes=regimes)
        boot_seed = component_seed(seed, "bootstrap")
        interval = bootstrap_b_crit(sizes, steps, n_boot=spec.bootstrap, seed=boot_seed, ci=CI)
        lrs = table[table["status"] == "reached"]["best_lr"].astype(float).tolist()
        lr_fit = lr_rule_fit(sizes, lrs) if all(math.isfinite(x) and x > 0 for x in lrs) else None
        text = conclusion(
            fit,
            regimes,
            lr_fit,
            b_crit_interval=interval,
            ci=CI,
            not_reached=not_reached,
            interpolated=goal.interpolate,
            forced=None if spec.lr_grid else _forced(study),
            tuned=_tuned(study, spec, goal),
        )
        _, examples = reached_points(table, "examples_to_target")
        plots.append(
            plot_steps_to_target(
                out / "steps_to_target.png", sizes, steps, fit, b_crit_interval=interval, ci=CI, not_reached=not_reached
            )
        )
        plots.append(
            plot_examples_to_target(
                out / "examples_to_target.png",
                sizes,
                examples,
                fit,
                b_crit_interval=interval,
                ci=CI,
                not_reached=not_reached,
            )
        )
        if lr_fit is not None:
            plots.append(plot_lr_rule(out / "lr_rule.png", lr_fit, ci=CI))
    if spec.lr_grid:
        from search.scaling.grid_plot import plot_lr_grid

        plots.append(plot_lr_grid(out / "lr_grid.png", _grid_points(study, goal)))
    best = {int(r.batch_size): int(r.best_trial) for r in table.itertuples() if r.status == "reached"}
    noise = _noise_histories(study, best)
    if noise:
        plots.append(plot_noise_scale(out / "noise_scale.png", noise))
    if noise and len(set(sizes)) >= 3:
        text, compared = _against_b_crit(noise, fit, interval, text, out)
        plots.extend(compared)
    table_path = write_scaling_table(table, out / "scaling.csv")
    (out / "conclusion.txt").write_text(text + "\n")
    return SweepResult(out, table_path, tuple(plots), text)
