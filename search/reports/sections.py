"""The report's sections about the search itself: the spec, the best trials, LR, history, curves, importances,
pruning and the Pareto front. Each builder takes the :class:`CampaignData` and returns a :class:`Section`,
left out (with the reason) when it has nothing to show.

What the report says must hold for any trainer: the dataset and the rebuilt LR schedule
come only from the built-in trainer (whose config and rules are known); everything else
comes from what the trials recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial

from search.reports import plots
from search.reports.data import (
    MAX_IMPORTANCE_TRIALS,
    MIN_IMPORTANCE_TRIALS,
    CampaignData,
    LRScaled,
    dataset_of,
    epochs_spent,
    genome_of,
    history_of,
    history_points,
    importances,
    lr_curve,
    lr_scaled,
    searched_params,
)
from search.reports.markup import LeftOut, Section, e, figure, fmt, guard, kv, left_out, md_table, note, table
from search.reports.step_axis import step_label
from search.spec.campaign_spec import CampaignSpec
from search.store.records import spec_sha256_of
from search.store.warm_marks import own_trials
from search.vocab.terms import StopReason, maximizing
from spaces.genomes import CELL_EDGES, CELL_OPS, CellSpace, LayerSpace

__all__ = ["spec", "best", "lr", "history", "curves", "importance", "pruning", "pareto", "MAX_CURVE_TRIALS"]

MAX_CURVE_TRIALS = 60
TOP_K = 5  # the best trials the LR figure and the learning curves single out


def _question(data: CampaignData) -> str:
    s = data.spec
    goals = " and ".join(f"{d} {m}" for d, m in zip(s.objective_directions, s.objective_metrics, strict=True))
    goals += f" (optimizer steps until {data.sweep.target_text})" if data.sweep else ""
    searched = ", ".join(name for name, _what in _space_rows(data)) or "no parameters"
    if s.trainer.objective:  # define-by-run: no epochs of ours, the objective suggests what it searches
        return (
            f"Which settings of {searched} (as the objective suggested them) {goals} for the objective "
            f"{s.trainer.entry}, {_within(s)}?"
        )
    dataset = dataset_of(s)
    on = f" on {dataset!r}" if dataset else ""
    return (
        f"Which settings of {searched} {goals} for the trainer {s.trainer.entry}{on} "
        f"({s.trainer.epochs} epochs per trial), {_within(s)}?"
    )


def _within(s: CampaignSpec) -> str:
    if s.scaling is not None and s.scaling.lr_grid:  # the rounds add trials wherever a best rate is at an edge
        grid = f"over a grid of {s.scaling.lr_grid} learning rates per batch size ({s.study.n_trials} trials)"
        return f"{grid}, widened wherever a best rate is at its edge"
    return f"within {s.study.n_trials} trials of the {s.study.sampler} sampler"


def _space_rows(data: CampaignData) -> list[tuple[str, str]]:
    """Each searched parameter and what it ranges over; an architecture as one row, not its flat parameters."""
    s = data.spec
    if s.trainer.objective:
        return _suggested_rows(data.trials)
    rows = []
    for param in s.space:
        flat = param.distributions()
        if not flat:
            continue  # a fixed value: in the frozen spec
        if list(flat) == [param.name]:
            rows.append((param.name, distribution_text(flat[param.name])))
        else:
            genomes = getattr(param, "space", None)
            rows.append(
                (
                    param.name,
                    f"{_genome_space_text(genomes)} (searched as {len(flat)} Optuna parameters {param.name}.*)",
                )
            )
    return rows


def _suggested_rows(trials: Sequence[FrozenTrial]) -> list[tuple[str, str]]:
    """A define-by-run objective's space: each parameter its trials suggested, the distribution of its first
    suggestion, and in how many trials it was suggested where not in all (a conditional parameter)."""
    first: dict[str, BaseDistribution] = {}
    count: dict[str, int] = {}
    asked = [t for t in trials if t.distributions]
    for trial in asked:
        for name, dist in trial.distributions.items():
            first.setdefault(name, dist)
            count[name] = count.get(name, 0) + 1
    return [
        (
            name,
            distribution_text(dist)
            + ("" if count[name] == len(asked) else f" (in {count[name]} of {len(asked)} trials)"),
        )
        for name, dist in first.items()
    ]


def distribution_text(dist: BaseDistribution) -> str:
    """An Optuna distribution in words: ``log-uniform float from 0.0001 to 0.3``, ``one of: adam, sgd``."""
    if isinstance(dist, CategoricalDistribution):
        return "one of: " + ", ".join(map(str, dist.choices))
    if isinstance(dist, (FloatDistribution, IntDistribution)):
        kind = "integer" if isinstance(dist, IntDistribution) else "float"
        shape = "log-uniform " if dist.log else "uniform "
        step = f" in steps of {dist.step:g}" if dist.step not in (None, 1) else ""
        return f"{shape}{kind} from {dist.low:g} to {dist.high:g}{step}"
    return repr(dist)


def _genome_space_text(genomes: object) -> str:
    if isinstance(genomes, CellSpace):
        return (
            f"a NAS-Bench-201 cell: one of {len(CELL_OPS)} ops ({', '.join(CELL_OPS)}) on each of its "
            f"{len(CELL_EDGES)} edges, {genomes.size:,} cells"
        )
    if isinstance(genomes, LayerSpace):
        limit = f", at most {genomes.max_params:,} parameters" if genomes.max_params else ""
        return (
            f"a stack of {genomes.min_depth} to {genomes.max_depth} layers, widths "
            f"{', '.join(map(str, genomes.widths))}, kernels {', '.join(map(str, genomes.kernels))}{limit}"
        )
    return f"architecture genome {genomes!r}"


def _whose(data: CampaignData) -> str:
    if data.spec.trainer.objective:
        return " (your own, define-by-run)"
    return "" if data.builtin_trainer else " (your own trainer)"


def _spec_comment(text: str) -> str:
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# ").rstrip())
    return "\n".join(lines).strip()


def spec(data: CampaignData) -> Section:
    s = data.spec
    recorded = spec_sha256_of(data.study)
    check = "matches the study's record" if recorded == s.sha256 else f"DIFFERS from the study's record {recorded}"
    dataset = dataset_of(s)
    pairs = [
        ("study", s.study.name),
        ("frozen spec.toml sha256", f"{s.sha256} ({check})"),
        (
            "objective",
            ", ".join(f"{d} {m}" for d, m in zip(s.objective_directions, s.objective_metrics, strict=True))
            + (f" (optimizer steps until {data.sweep.target_text})" if data.sweep else ""),
        ),
        ("sampler", s.study.sampler),
        ("pruner", s.study.pruner),
        ("trials (budget)" if not (s.scaling and s.scaling.lr_grid) else "trials (lr grid)", s.study.n_trials),
        ("study seed", s.study.seed),
        ("deterministic", s.study.deterministic),
        ("objective function" if s.trainer.objective else "trainer", s.trainer.entry + _whose(data)),
        *([("dataset", dataset)] if dataset else []),
        *([] if s.trainer.objective else [("epochs per trial", s.trainer.epochs)]),
        ("device", s.trainer.device),
    ]
    kv_html, kv_md = kv(pairs)
    space = _space_rows(data)
    comment = _spec_comment(s.text)
    body = (
        f'<p class="question">{e(_question(data))}</p>'
        + (f"<p>{e(comment)}</p>" if comment else "")
        + kv_html
        + "<h3>Search space</h3>"
        + table(("parameter", "distribution"), space)
        + f"<details><summary>frozen spec.toml</summary><pre>{e(s.text)}</pre></details>"
    )
    md = (
        f"**Question.** {_question(data)}\n\n"
        + (f"{comment}\n\n" if comment else "")
        + kv_md
        + "\n\nSearch space:\n\n"
        + md_table(("parameter", "distribution"), space)
        + f"\n\n```toml\n{s.text.rstrip()}\n```"
    )
    return Section("The question and the spec", body, md)


def best(data: CampaignData) -> Section:
    def build() -> tuple[str, str]:
        top = data.best()
        if not top:
            raise LeftOut("; ".join(data.best_notes()) or "no complete trial yet")
        space = data.spec.space
        chosen = {t.number: searched_params(data.record(t), space) for t in top}
        names = list(dict.fromkeys(k for params in chosen.values() for k in params))
        genomes = {t.number: genome_of(data.record(t), space) for t in top}
        has_genome = any(g and g not in chosen[n].values() for n, g in genomes.items())  # else a column shows it
        constraints = list(data.spec.study.constraints)  # each trial's value: <= 0 is feasible
        several = data.spec.study.multi_objective  # a front has no ranking: no rank column
        columns = [*([] if several else ["rank"]), "trial", *data.metrics, *constraints, "seed", "epochs"]
        columns += ["duration s", *names, *(["genome"] if has_genome else [])]
        rows = []
        for rank, t in enumerate(top, 1):
            r = data.record(t)
            row = [
                *([] if several else [rank]),
                r.number,
                *(r.values or []),
                *(t.constraints.get(name) for name in constraints),
                r.seed,
                epochs_spent(r),
                r.duration,
                *(chosen[r.number].get(n) for n in names),
            ]
            rows.append(row + ([genomes[r.number]] if has_genome else []))
        label = _front_text(data, len(top)) if several else f"the {len(top)} best complete trials"
        if data.sweep is not None:
            label = f"the {len(top)} trials with the fewest steps to target: {data.sweep.counts_text()}"
        else:
            label = "; ".join([label, *data.best_notes()])
        return f"<p>{e(label)}</p>" + table(columns, rows), f"{label}:\n\n" + md_table(columns, rows)

    return guard("Best trials", build)


def _front_text(data: CampaignData, n: int) -> str:
    """What a multi-objective study's table shows: its Pareto front, which has no single ranking."""
    goals = ", ".join(f"{d} {m}" for d, m in zip(data.directions, data.metrics, strict=True))
    return (
        f"the Pareto front: {n} trial(s), none better than another in every objective ({goals}); a front has "
        f"no single ranking, so none is 'the best': listed by {data.metrics[0]}, not ranked"
    )


def lr(data: CampaignData) -> Section:
    """The LR the best trials followed: as reported by the trainer, else (built-in trainer only) rebuilt."""

    def build() -> tuple[str, str]:
        top = data.best()[:TOP_K]
        if not top:
            raise LeftOut("no complete trial yet")
        found = {t.number: lr_curve(data.record(t), data.builtin_trainer) for t in top}
        curves = {n: c for n, c in found.items() if c[0]}
        if not curves:
            raise LeftOut(
                "the best trials reported no 'lr' metric"
                + (
                    ""
                    if data.builtin_trainer
                    else ", and only the built-in trainer's schedule can be rebuilt from its rules"
                )
            )
        sources = {
            "reported": "reported by the trainer (its 'lr' metric at each report)",
            "rebuilt": "rebuilt from the built-in trainer's schedule rules (it reported no lr)",
        }
        rows: list[tuple[Any, ...]] = [
            (n, sources[src], len(pts), pts[0][1], pts[-1][1], min(v for _s, v in pts), max(v for _s, v in pts))
            for n, (pts, src) in curves.items()
        ]
        columns: tuple[str, ...] = ("trial", "learning rate", "points", "first", "last", "min", "max")
        scaled = (
            {t.number: lr_scaled(data.record(t)) for t in top if t.number in curves} if data.builtin_trainer else {}
        )
        notes = [_lr_scaling_note([s for s in scaled.values() if s is not None])]
        if any(scaled.values()):  # the searched rate beside the trained one: the best-trials table shows the searched
            columns += ("searched lr", "batch size")
            rows = [(*row, *_searched(scaled.get(row[0]))) for row in rows]
        missing = sorted(set(found) - set(curves))
        notes.append("" if not missing else f"no lr for trial(s) {', '.join(map(str, missing))}")
        text = "\n\n".join(n for n in notes if n)
        x = step_label(history_of(data.record(t)) for t in top if t.number in curves)
        body = figure(plots.lr_curves(curves, x), "learning rate of the best trials") + table(columns, rows)
        body += "".join(note(n) for n in notes if n)
        return body, md_table(columns, rows) + (f"\n\n{text}" if text else "")

    return guard("Learning rate of the best trials", build)


def _searched(scaled: LRScaled | None) -> tuple[Any, Any]:
    return (scaled.searched, scaled.batch_size) if scaled is not None else ("", "")


def _lr_scaling_note(scaled: Sequence[LRScaled]) -> str:
    """Why the trained rates differ from the searched ``lr`` of the best-trials table ("" when they do not)."""
    if not scaled:
        return ""
    rules = sorted({s.rule for s in scaled}, key=lambda r: (r.rule, r.base_batch_size))
    how = "; ".join(f"{r.formula()} (lr_scaling = {r.rule!r}, base_batch_size = {r.base_batch_size:,})" for r in rules)
    return (
        f"The trainer trained at the searched lr scaled to the trial's batch size B: {how}. The curves and the "
        "first, last, min and max columns show that trained rate; the best-trials table and the 'searched lr' "
        "column, the searched lr."
    )


def history(data: CampaignData) -> Section:
    def build() -> tuple[str, str]:
        if not data.complete():
            raise LeftOut("no complete trial yet")
        several = data.spec.study.multi_objective
        front = [t.number for t in data.best()] if several else None
        body = md = ""
        if several:
            text = (
                "A multi-objective study has no single best, so no best-so-far line: each objective's value per "
                f"trial, the {len(front or [])} trial(s) of the Pareto front ringed."
            )
            body, md = note(text), text + "\n\n"
        for i, (metric, direction) in enumerate(zip(data.metrics, data.directions, strict=True)):
            points = history_points(data, i)
            drawn = plots.optimization_history(
                points.complete,
                points.pruned,
                points.failed,
                maximizing(direction),
                metric,
                points.cuts,
                points.infeasible,
                front,
            )
            values = [v for _n, v, _t in points.complete]
            extreme = "highest" if maximizing(direction) else "lowest"
            counts = (
                f"{len(points.complete)} complete, {len(points.pruned)} pruned, {len(points.failed)} failed; "
                + (f"{extreme} " if several else "best ")
                + (fmt(_best_value(values, direction)) if values else "none yet")
            )
            if points.infeasible:
                counts += f"; {len(points.infeasible)} infeasible (hollow, not in the best so far)"
            if points.not_reached:
                counts += f"; not drawn: {len(points.not_reached)} that never reached the target"
            shows = "the Pareto front ringed" if several else "with the best so far"
            body += figure(drawn, f"optimization history of {metric}: {counts}, {shows}")
            body += note(f"{metric}: {counts}")
            md += f"- {metric}: {counts}\n"
        return body, md

    title = "Optimization history" + ("" if data.spec.study.multi_objective else " and best so far")
    return guard(title, build)


def _best_value(values: Sequence[float], direction: str) -> float:
    return max(values) if maximizing(direction) else min(values)


def curves(data: CampaignData) -> Section:
    def build() -> tuple[str, str]:
        label = data.sweep.state_label if data.sweep is not None else (lambda _n, state: state)
        reported = {r.number: r for r in data.records() if r.recorded_history}
        if not reported:
            raise LeftOut("no trial reported yet")
        top = [t.number for t in data.best()[:TOP_K] if t.number in reported]
        chosen = set(top)
        rest = [n for n in sorted(reported) if n not in chosen][: max(0, MAX_CURVE_TRIALS - len(top))]
        shown = {n: (label(n, reported[n].state.name), history_of(reported[n])) for n in sorted([*top, *rest])}
        seen = {k for _s, h in shown.values() for _step, m in h for k in m}
        reported_metrics = data.spec.study.metrics  # a sweep's target metric, not its steps-to-target objective
        extra = [m for m in ("train_loss", "val_loss") if m in seen and m not in reported_metrics]
        metrics = [m for m in reported_metrics if m in seen] + extra
        if not metrics:
            raise LeftOut(f"the trials reported none of the study's metrics ({', '.join(reported_metrics)})")
        several = data.spec.study.multi_objective
        drawn = plots.learning_curves(shown, metrics, top, ranked=not several)
        who = f"{len(top)} of the front" if several else f"best {len(top)}"
        cut = f" (the {who} and the first others, of {len(reported)})" if len(reported) > len(shown) else ""
        best_text = (
            f"{'the Pareto front' if several else 'the best'}: trial(s) {', '.join(map(str, top))}, drawn thick; "
            if top
            else ""
        )
        text = f"{len(shown)} trials{cut}; {best_text}the others coloured by their final state"
        text += "".join(f"; {line}" for line in drawn.legend if ": " in line and "cut off" in line)
        body = figure(drawn, "learning curves") + note(text)
        return body, f"Learning curves of {len(shown)} trials for {', '.join(metrics)}: {text} (figure in index.html)."

    return guard("Learning curves", build)


def importance(data: CampaignData) -> Section:
    title = "Parameter importances (Optuna)"
    n = len(data.complete())
    if n < MIN_IMPORTANCE_TRIALS:
        return left_out(
            title,
            f"importances skipped: only {n} complete trial(s), fewer than the "
            f"{MIN_IMPORTANCE_TRIALS} they need to mean anything",
        )

    def build() -> tuple[str, str]:
        values, problem = importances(data)
        used = (
            f"{n} complete trials"
            if n <= MAX_IMPORTANCE_TRIALS
            else (f"a random {MAX_IMPORTANCE_TRIALS:,} of the {n:,} complete trials (seed 0)")
        )
        basis = (
            f"based on {used} (pruned and failed ones are not used; importances are shown from "
            f"{MIN_IMPORTANCE_TRIALS} complete trials on)"
        )
        genomes = [p.name for p in data.spec.space if len(p.distributions()) > 1]
        if genomes:
            basis += f"; an architecture's ({', '.join(genomes)}) is the sum over its flat Optuna parameters"
        body, md = note(basis), basis + "\n\n"
        for metric, scores in values.items():
            body += figure(plots.importance_bars(scores, metric), f"parameter importances for {metric}")
            body += table(("parameter", f"importance ({metric})"), scores.items())
            md += f"{metric}:\n\n" + md_table(("parameter", "importance"), scores.items()) + "\n\n"
        if problem:
            body += note(f"Optuna's importances could not be computed: {problem}")
            md += f"Optuna's importances could not be computed: {problem}\n"
        return body, md

    return guard(title, build)


EARLY_STOPS = (StopReason.PRUNED.value, StopReason.TARGET_REACHED.value, StopReason.OUTPACED.value)  # save epochs
_WHY = {StopReason.TARGET_REACHED.value: "at the scaling target", StopReason.OUTPACED.value: "as outpaced"}


def _epochs_not_trained(data: CampaignData) -> str:
    """Where the epochs the trials did not train went: early stops (the pruner, a scaling target), failures,
    time limits; only what happened is said."""
    budget = data.spec.trainer.epochs
    early = failed = timed = 0.0
    stopped: dict[str, int] = {}
    for r in data.records():
        left = max(0.0, budget - epochs_spent(r))
        if r.stop_reason in EARLY_STOPS or (r.state.name == "PRUNED" and not r.stop_reason):
            why = _WHY.get(r.stop_reason, "by the pruner")
            early, stopped[why] = early + left, stopped.get(why, 0) + 1
        elif r.state.name == "FAIL":
            failed += left
        elif r.stop_reason:
            timed += left
    total = budget * len(data.trials)
    pruner = data.spec.study.pruner
    if stopped:
        share = f" ({early / total:.0%})" if total else ""
        how = ", ".join(f"{n} trial(s) stopped {why}" for why, n in sorted(stopped.items()))
        parts = [f"pruner {pruner}; epochs not trained thanks to early stopping: {early:g} of {total:g}{share} ({how})"]
    else:
        parts = [f"pruner {pruner}; no trial was stopped early" + (" (no pruner)" if pruner == "none" else "")]
    n_failed = sum(1 for r in data.records() if r.state.name == "FAIL")
    if failed:
        parts.append(f"{failed:g} epochs not trained because {n_failed} trial(s) failed")
    if timed:
        parts.append(f"{timed:g} epochs cut by the time budget or a trial timeout")
    return "; ".join(parts)


def pruning(data: CampaignData) -> Section:
    def build() -> tuple[str, str]:
        if not data.trials:
            raise LeftOut("no trial yet")
        counts = data.counts()
        per_state: dict[str, list[float]] = {}
        reasons: dict[str, int] = {}
        for r in data.records():
            per_state.setdefault(r.state.name, []).append(epochs_spent(r))
            if r.stop_reason:
                reasons[r.stop_reason] = reasons.get(r.stop_reason, 0) + 1
        total = sum(sum(v) for v in per_state.values())
        rows = [(state, counts.get(state, len(spent)), sum(spent)) for state, spent in sorted(per_state.items())]
        rows.append(("total", len(data.trials), total))
        text = _epochs_not_trained(data)
        body = note(text) + table(("state", "trials", "epochs trained"), rows)
        if reasons:
            body += "<h3>Stop reasons</h3>" + table(("reason", "trials"), sorted(reasons.items()))
        bars = [(r.number, epochs_spent(r), r.state.name) for r in data.records()]
        body += figure(plots.epochs_bars(bars, data.spec.trainer.epochs), "epochs trained per trial")
        return body, text + "\n\n" + md_table(("state", "trials", "epochs trained"), rows)

    return guard("Pruning and epochs spent", build)


def pareto(data: CampaignData) -> Section:
    def build() -> tuple[str, str]:
        if not data.spec.study.multi_objective:
            raise LeftOut("a single-objective study has no Pareto front")
        front = own_trials(data.study.best_trials)  # not warm-start copies
        names = data.metrics
        text = (
            f"{len(front)} trial(s) on the front (red, joined), the other complete trials grey: along the front one "
            f"objective is bought with another, so which to take is the reader's choice. The front's trials and "
            "their settings are in the Best trials table above."
        )
        body = note(text)
        if len(names) >= 2 and data.complete():
            points = [(t.values[0], t.values[1]) for t in data.complete()]
            drawn = plots.pareto(points, [(t.number, t.values[0], t.values[1]) for t in front], names)
            body = figure(drawn, "Pareto front") + body
            if len(names) > 2:
                body += note(f"drawn in the first two objectives only ({names[0]}, {names[1]})")
        return body, text

    return guard("Pareto front", build)
