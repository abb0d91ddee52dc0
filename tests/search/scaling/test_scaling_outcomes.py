"""A sweep's objective as status, the report and reproduce read it; the conclusion keeps to what was measured."""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path

import numpy as np
import optuna
import pytest
from matplotlib.collections import PolyCollection

from search.scaling.conclusion import conclusion
from search.scaling.fit import classify_regimes, fit_mccandlish
from search.scaling.measured import doubling_ratios, limit_intervals, measured_regime, ratio_sentence
from search.scaling.numbers import approx
from search.scaling.outcomes import TargetOutcome, goal_of, status_lines, sweep_outcomes
from search.scaling.plots import draw_noise_scale
from search.scaling.regimes import Regime
from search.scaling.replay import replay_notes, replay_plan
from search.spec.campaign_spec import parse_spec
from search.spec.scaling import BATCH
from search.store.records import Attr, TrialRecord, encode_history

ROOT = Path(__file__).resolve().parents[3]
SPEC = parse_spec(tomllib.loads((ROOT / "examples" / "digits-scaling.toml").read_text()), "digits-scaling.toml")


def history(accuracies: list[float], losses: list[float], per_epoch: int) -> list[tuple[int, dict[str, float]]]:
    return [
        (i + 1, {"val_accuracy": a, "train_loss": loss, "steps": float((i + 1) * per_epoch)})
        for i, (a, loss) in enumerate(zip(accuracies, losses, strict=True))
    ]


def sweep_study() -> optuna.Study:
    """Trials 0, 1 reach 0.95 (at 2 and 1 epochs of 10 steps), 2 never does, 3 diverges (loss rises)."""
    study = optuna.create_study(direction="minimize")
    dists = {
        BATCH: optuna.distributions.CategoricalDistribution((8, 16)),
        "lr": optuna.distributions.FloatDistribution(1e-3, 1.0, log=True),
    }
    runs = [
        (16, [0.9, 0.96, 0.97], [1.0, 0.5, 0.4], 25.0),
        (16, [0.96, 0.97], [0.9, 0.3], 10.0),
        (8, [0.5, 0.8, 0.9], [2.0, 1.0, 0.8], 60.0),  # never reached: told twice its 30 steps
        (8, [0.1, 0.1, 0.1], [2.3, 5.0, 40.0], 60.0),  # diverged
    ]
    for b, acc, loss, value in runs:
        study.add_trial(
            optuna.trial.create_trial(
                params={BATCH: b, "lr": 0.1},
                distributions=dists,
                value=value,
                user_attrs={Attr.HISTORY: encode_history(history(acc, loss, 10))},
            )
        )
    return study


def test_only_trials_that_reached_the_target_are_ranked_and_the_others_are_named() -> None:
    trials = sweep_study().get_trials()
    view = sweep_outcomes(SPEC, trials)
    assert view is not None
    assert view.outcomes == {
        0: TargetOutcome.REACHED,
        1: TargetOutcome.REACHED,
        2: TargetOutcome.NOT_REACHED,
        3: TargetOutcome.DIVERGED,
    }
    assert view.ranked == [1, 0]  # fewest steps first; 2 and 3 (told 60, fewer than nothing) are not ranked
    assert view.counts_text() == (
        "2 of 4 complete trial(s) reached val_accuracy >= 0.95; 1 never did; "
        "1 diverged (training loss ended non-finite or above its start)"
    )
    assert view.state_label(3, "COMPLETE") == "DIVERGED" and view.state_label(0, "COMPLETE") == "COMPLETE"
    lines = status_lines(SPEC, trials)
    assert lines[0] == "  objective: minimize steps_to_target (optimizer steps until val_accuracy >= 0.95)"
    assert "  best steps_to_target = 10 (trial 1)" in lines[2]
    assert "B=8 not reached (0/2, 1 diverged)" in lines[3] and "B=16 10 steps (trial 1, 2/2 reached)" in lines[3]
    assert "val_accuracy" not in lines[2]  # the value is steps, not the target metric
    plain = parse_spec(tomllib.loads((ROOT / "examples" / "digits.toml").read_text()), "digits.toml")
    assert goal_of(plain) is None and sweep_outcomes(plain, trials) is None


def test_a_target_stopped_trial_is_replayed_to_the_same_report_and_checked_there() -> None:
    goal = goal_of(SPEC)
    assert goal is not None
    trial = TrialRecord.of(sweep_study().trials[0])  # reached at report 2; report 3 came before the stop landed
    plan = replay_plan(goal, trial)
    assert plan.stop_after == 3 and plan.recorded_hit == 1
    same = replay_notes(plan, trial.history, trial.history)
    assert len(same) == 1 and "reached at step 2 (report 2 of 3)" in same[0] and not same[0].startswith("MISMATCH")
    later = history([0.9, 0.94, 0.96], [1.0, 0.5, 0.4], 10)
    assert replay_notes(plan, trial.history, later)[0].startswith("MISMATCH: the record reached val_accuracy")
    never = history([0.9, 0.94, 0.94], [1.0, 0.5, 0.4], 10)
    assert "the replay never did" in replay_notes(plan, trial.history, never)[0]
    unreached = replay_plan(goal, TrialRecord.of(sweep_study().trials[2]))
    assert unreached.stop_after is None  # never reached: it trained every epoch, and so does the replay
    outpaced = optuna.trial.create_trial(
        state=optuna.trial.TrialState.PRUNED,
        params={BATCH: 8},
        distributions={BATCH: optuna.distributions.CategoricalDistribution((8, 16))},
        user_attrs={Attr.HISTORY: encode_history(history([0.5, 0.8], [2.0, 1.0], 10)), "stop_reason": "outpaced"},
    )
    stopped = replay_plan(goal, TrialRecord.of(outpaced))  # stopped short of the target: replayed as far
    assert stopped.stop_after == 2 and stopped.recorded_hit is None
    empty = TrialRecord.of(optuna.trial.create_trial(params={}, distributions={}, value=1.0))
    with pytest.raises(ValueError, match="recorded no reports: where it reached val_accuracy >= 0.95 is unknown"):
        replay_plan(goal, empty)


# ----------------------------------------------------------------------------- the conclusion


SIZES = [8, 16, 32, 64, 128, 256]
# Steps like the digits sweep of issue 22: a fit that puts B_maximal beyond 256, and measured ratios
# (16 -> 32, 128 -> 256) whose regimes are not the fitted curve's.
STEPS = [760.0, 400.0, 370.0, 120.0, 75.0, 44.75]


def test_measured_ratios_and_their_regimes() -> None:
    measured = dict(zip(SIZES, STEPS, strict=True))
    ratios = doubling_ratios(measured)
    assert list(ratios) == [8, 16, 32, 64, 128] and ratios[16] == pytest.approx(370 / 400)
    assert measured_regime(0.5) is Regime.PERFECT_SCALING and measured_regime(0.95) is Regime.MAXIMAL_DATA_PARALLELISM
    assert measured_regime(0.7) is Regime.DIMINISHING_RETURNS
    fitted = {b: Regime.DIMINISHING_RETURNS for b in SIZES}
    text = ratio_sentence(measured, fitted)
    assert text.startswith("Measured, doubling the batch size took the steps to target to 0.53x at B=8, 0.93x at B=16")
    assert "disagree with the fitted curve at B=8 (measured 0.53x: perfect scaling; fitted: diminishing " in text
    assert "B=16 (measured 0.93x: maximal data parallelism; fitted: diminishing returns)" in text
    assert "falls in the regime" in ratio_sentence({8: 100.0, 16: 80.0}, {8: Regime.DIMINISHING_RETURNS})


def test_limit_intervals_follow_the_b_crit_interval_and_open_where_it_does() -> None:
    fit = fit_mccandlish(SIZES, STEPS)
    (s_lo, s_hi), (e_lo, e_hi) = limit_intervals(SIZES, STEPS, (fit.b_crit * 0.5, fit.b_crit * 2))
    assert s_lo < fit.s_min < s_hi and e_lo < fit.e_min < e_hi
    (s_lo, _), (_, e_hi) = limit_intervals(SIZES, STEPS, (fit.b_crit * 0.5, math.inf))
    assert s_lo == 0.0 and math.isfinite(e_hi)
    (_, _), (e_lo, _) = limit_intervals(SIZES, STEPS, (0.0, fit.b_crit))
    assert e_lo == 0.0


def test_the_conclusion_marks_every_figure_outside_the_measured_range() -> None:
    fit = fit_mccandlish(SIZES, STEPS)
    regimes = classify_regimes(fit, SIZES)
    assert 4 * fit.b_noise > 256  # the start of maximal data parallelism lies beyond what was measured
    text = conclusion(fit, regimes, b_crit_interval=(fit.b_crit * 0.5, math.inf))
    assert "start of maximal data parallelism at B≈" in text
    after = text.split("start of maximal data parallelism at B≈", 1)[1]
    assert after.split(";", 1)[0].endswith(
        "(beyond the largest batch size measured, 256: an extrapolation of the fit, not determined by these batch sizes"
    )
    assert (
        "S_min and E_min are the fit's limits for an unbounded and a vanishing batch size, so extrapolations: "
        "the fewest steps measured were 44.75 (B=256)" in text
    )
    assert "S_min 90% interval: below" in text and "not bounded below by these data" in text
    assert (
        "The measured ratios disagree with the fitted curve at B=16 (measured 0.93x: maximal data parallelism; "
        "fitted: perfect scaling), B=64" in text
    )
    bounded = conclusion(fit, regimes, b_crit_interval=(fit.b_crit * 0.8, fit.b_crit * 1.25))
    assert "an extrapolation of the fit; 90% interval " in bounded and "not determined by these" not in bounded
    assert re.search(r"S_min 90% interval [0-9.,]+–[0-9.,]+; E_min 90% interval [0-9.,]+–[0-9.,]+\.", bounded)
    inside = fit_mccandlish(
        [8, 16, 32, 64, 128, 256, 512, 1024], [500 * (1 + 64 / b) for b in [8, 16, 32, 64, 128, 256, 512, 1024]]
    )
    text = conclusion(inside, classify_regimes(inside, [8, 16, 32, 64, 128, 256, 512, 1024]))
    assert "extrapolation of the fit" not in text.split("S_min and E_min")[0]  # every boundary lies inside 8..1024
    assert "B_crit≈64:" in text
    assert "Each of these ratios falls in the regime the fitted curve gives there." in text


# ----------------------------------------------------------------------------- the noise-scale plot


def test_noise_scale_plot_draws_intervals_and_marks_above_range_readings() -> None:
    histories = {
        16: [(10, 40.0, 20.0, 90.0), (20, 50.0, 30.0, 80.0), (30, 55.0, 35.0, 75.0)],
        128: [(5, math.inf, 52.0, math.inf), (10, 131.0, 52.0, 17695.0), (15, math.inf, 60.0, math.inf)],
        256: [(4, math.inf, 70.0, math.inf)],  # only above-range readings: still drawn
        8: [(1, math.nan)],  # too few measurements: nothing to draw
    }
    fig = draw_noise_scale(histories)
    ax = fig.axes[0]
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2  # B=16 and B=128 have bounded intervals
    triangles = [line for line in ax.get_lines() if line.get_marker() == "^" and len(line.get_xdata())]
    assert sorted(len(t.get_xdata()) for t in triangles) == [1, 2]
    assert sorted(np.concatenate([t.get_ydata() for t in triangles]).tolist()) == [52.0, 60.0, 70.0]
    labels = ax.get_legend_handles_labels()[1]
    assert "above range (at its lower bound)" in labels and {"B=16", "B=128", "B=256"} <= set(labels)
    assert ax.get_yscale() == "log"
    plain = draw_noise_scale({32: [(1, 10.0), (2, 12.0)]})  # (step, b_simple) pairs still draw
    assert not [c for c in plain.axes[0].collections if isinstance(c, PolyCollection)]


def test_the_steps_plot_draws_the_fit_dashed_where_nothing_was_measured() -> None:
    from matplotlib.figure import Figure

    from search.scaling.plots import draw_steps_to_target

    fit = fit_mccandlish(SIZES, STEPS)
    assert fit.b_crit > max(SIZES)
    fig = Figure()
    draw_steps_to_target(fig.add_subplot(), SIZES, STEPS, fit, b_crit_interval=(fit.b_crit * 0.8, fit.b_crit * 1.2))
    lines = {str(line.get_label()): line for line in fig.axes[0].get_lines()}
    dashed = lines["the fit outside the measured batch sizes (extrapolated)"]
    assert dashed.get_linestyle() == "--"
    solid = next(line for label, line in lines.items() if label.startswith("fit: S_min≈"))
    assert min(solid.get_xdata()) >= 8 and max(solid.get_xdata()) <= 256
    assert "(its B→∞ limit: extrapolated)" in solid.get_label()
    assert f"B_crit≈{approx(fit.b_crit)} (outside the measured B: extrapolated)" in lines


def test_the_end_of_run_summary_of_a_sweep_ranks_only_trials_that_reached_the_target(tmp_path: Path) -> None:
    from search.session.runner import summary_text
    from search.store.folder import CampaignFolder

    study = sweep_study()
    dists = study.trials[0].distributions
    history_short = encode_history(history([0.4, 0.5], [1.0, 0.8], 1))  # 2 steps, not reached: told 4
    study.add_trial(
        optuna.trial.create_trial(
            params={BATCH: 8, "lr": 0.1}, distributions=dists, value=4.0, user_attrs={Attr.HISTORY: history_short}
        )
    )
    text = summary_text(SPEC, CampaignFolder(tmp_path / "sweep"), study)
    table = text.split("Best trials of study", 1)[1].split("\n\n", 1)[0]
    numbers = [int(line.split()[0]) for line in table.splitlines() if " COMPLETE " in line]
    assert numbers == [1, 0]  # trial 4's 4.0 is a penalty, not steps to the target
    assert "2 of 5 complete trial(s) reached val_accuracy >= 0.95; 2 never did; 1 diverged" in table
