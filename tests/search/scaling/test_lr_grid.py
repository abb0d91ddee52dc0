"""A tuned learning rate at every batch size: the grid, the bracket and the widening decision, the stop of a trial
that can no longer be its batch size's best, and the spec keys."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import re
import tomllib
from pathlib import Path

import optuna
import pandas as pd
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState

from cluster.outcome import Outcome, TrialStatus
from search.loop.outpaced import Outpaced
from search.loop.segments import Stop
from search.loop.trials import TrialView
from search.scaling.lr_grid import Edge, bracket, bracket_sentence, brackets_of, grid_plan, grid_rates, widening
from search.scaling.target import TargetGoal
from search.spec.campaign_spec import CampaignSpec, SpecError, parse_spec
from search.spec.scaling import BATCH, LR, ScalingSpec
from search.store.folder import CampaignFolder
from search.store.records import Attr, encode_history
from search.vocab.terms import StopReason, Transition
from trainers.api import TrialConfig

ROOT = Path(__file__).resolve().parents[3]
LOW, HIGH, STEP = 0.001, 1.0, 2.0
INITIAL = (grid_rates(LOW, HIGH, 3, STEP)[0], grid_rates(LOW, HIGH, 3, STEP)[-1])


def test_the_grid_is_centred_on_the_ranges_geometric_middle_step_apart() -> None:
    rates = grid_rates(0.005, 20.0, 5, 2.0)
    assert math.isclose(rates[2], math.sqrt(0.005 * 20.0))
    assert all(math.isclose(b / a, 2.0) for a, b in zip(rates, rates[1:]))
    assert len(grid_rates(1.0, 16.0, 4, 2.0)) == 4 and math.isclose(grid_rates(1.0, 16.0, 4, 2.0)[0], 4 / 2**1.5)


def test_the_first_round_runs_every_batch_size_at_the_middle_rates_first() -> None:
    plan = grid_plan([16, 64], (1.0, 2.0, 4.0))
    assert plan == [
        {BATCH: 16, LR: 2.0},
        {BATCH: 64, LR: 2.0},
        {BATCH: 16, LR: 1.0},
        {BATCH: 64, LR: 1.0},
        {BATCH: 16, LR: 4.0},
        {BATCH: 64, LR: 4.0},
    ]


def test_a_best_rate_inside_the_tried_ones_is_bracketed_and_needs_nothing_more() -> None:
    found = bracket(32, [(0.01, 300.0), (0.02, 200.0), (0.04, 250.0)], INITIAL, LOW, HIGH, STEP)
    assert found.edge is Edge.INSIDE and found.best_lr == 0.02 and found.next_rates == ()
    assert not found.at_limit


@pytest.mark.parametrize(
    ("results", "edge", "following"),
    [
        ([(0.01, 300.0), (0.02, 250.0), (0.04, 200.0)], Edge.HIGH, (0.08,)),  # fastest at the top: one step up
        ([(0.01, 100.0), (0.02, 250.0), (0.04, None)], Edge.LOW, (0.005,)),  # at the bottom: one step down
        ([(0.01, None), (0.02, None), (0.04, None)], Edge.NONE, (0.005, 0.08)),  # none reached: both ways
    ],
)
def test_a_best_rate_at_an_edge_widens_one_step_further_out(
    results: list[tuple[float, float | None]], edge: Edge, following: tuple[float, ...]
) -> None:
    found = bracket(32, results, INITIAL, LOW, HIGH, STEP)
    assert found.edge is edge
    assert found.next_rates == pytest.approx(following)
    assert widening({32: found}) == [{BATCH: 32, LR: r} for r in found.next_rates]


def test_a_rate_that_did_not_reach_the_target_is_worse_than_any_that_did() -> None:
    # the highest tried rate diverged: the best (the middle one) is bracketed by it
    found = bracket(32, [(0.01, 300.0), (0.02, 200.0), (0.04, None), (0.04, math.inf)], INITIAL, LOW, HIGH, STEP)
    assert found.edge is Edge.INSIDE and found.tried == (0.01, 0.02, 0.04)


def test_widening_stops_at_the_edge_of_the_space_and_says_the_best_is_a_bound() -> None:
    found = bracket(256, [(0.25, 300.0), (0.5, 200.0), (0.9, 150.0)], INITIAL, LOW, HIGH, STEP)
    assert found.edge is Edge.HIGH and found.next_rates == () and found.at_limit and found.widened
    sentence = bracket_sentence({256: found}, ScalingSpec((16, 64, 256), 0.9, lr_grid=3), "sqrt")
    assert "0 of 1 batch sizes have their best rate inside" in sentence
    assert "B=256 the best rate is at the edge of [space] lr" in sentence and "a bound, not an optimum" in sentence
    assert "widened at 1 batch size(s) (rates trained with, B=256: 0.25 to 0.9)" in sentence
    sqrt = bracket_sentence({256: found}, ScalingSpec((16, 64, 256), 0.9, lr_grid=3), "sqrt", lambda lr, b: lr * 2)
    assert "(rates trained with, B=256: 0.5 to 1.8)" in sqrt  # the spec's lr_scaling applied


def _finished(study: optuna.Study, batch: int, lr: float, steps: float | None, state: TrialState) -> None:
    """A finished sweep trial: its reports reach 0.9 at ``steps`` (None: never reach it)."""
    history = [(1, {"val_accuracy": 0.5, "steps": 10.0, "examples": 10.0 * batch, "train_loss": 2.0})]
    last = 400.0 if steps is None else steps
    history.append((2, {"val_accuracy": 0.6 if steps is None else 0.95, "steps": last, "examples": last * batch}))
    value = steps if steps is not None and state == TrialState.COMPLETE else None
    study.add_trial(
        optuna.trial.create_trial(
            state=state,
            value=value if state == TrialState.COMPLETE else None,
            params={BATCH: batch, LR: lr},
            distributions={
                BATCH: CategoricalDistribution((16, 64, 128, 256)),
                LR: FloatDistribution(1e-3, 20.0, log=True),
            },
            user_attrs={Attr.HISTORY: encode_history(history)},
        )
    )


GOAL = TargetGoal("val_accuracy", 0.9, "max")
SPEC = ScalingSpec((16, 64), 0.9, lr_grid=3)


def test_brackets_are_read_from_the_finished_trials_only_once_the_round_is_over() -> None:
    study = optuna.create_study()
    middle, low, high = grid_rates(LOW, HIGH, 3, STEP)[1], INITIAL[0], INITIAL[1]
    for lr, steps in ((low, 300.0), (middle, 200.0), (high, 100.0)):
        _finished(study, 16, lr, steps, TrialState.COMPLETE)
    _finished(study, 64, low, None, TrialState.PRUNED)  # outpaced: worse than the best
    _finished(study, 64, middle, 50.0, TrialState.COMPLETE)
    _finished(study, 64, high, 80.0, TrialState.COMPLETE)
    brackets = brackets_of(study.get_trials(), SPEC, GOAL, LOW, HIGH)
    assert brackets is not None
    assert brackets[16].edge is Edge.HIGH and brackets[16].next_rates == pytest.approx((high * STEP,))
    assert brackets[64].edge is Edge.INSIDE
    assert widening(brackets) == [{BATCH: 16, LR: pytest.approx(high * STEP)}]
    study.enqueue_trial({BATCH: 16, LR: high * STEP})  # the next round, not run yet
    assert brackets_of(study.get_trials(), SPEC, GOAL, LOW, HIGH) is None


def test_a_resumed_round_gets_the_budget_of_every_trial_enqueued_so_far() -> None:
    """The frozen spec's budget is the grid's: a widening round cut short and resumed would never ask its waiting
    trials (the sweep then ended with them waiting)."""
    from search.session.lr_rounds import round_budget

    spec = parse_spec(_spec(batch_sizes=[64, 128, 256], lr_grid=3), "s.toml")
    study = optuna.create_study()
    for b in (64, 128, 256):
        for lr in grid_rates(0.005, 20.0, 3, 2.0):
            _finished(study, b, lr, 100.0, TrialState.COMPLETE)
    assert round_budget(spec, study).study.n_trials == 9 == spec.study.n_trials
    study.enqueue_trial({BATCH: 64, LR: 0.05})
    study.enqueue_trial({BATCH: 256, LR: 5.0})
    assert round_budget(spec, study).study.n_trials == 11


def test_the_next_round_enqueues_each_widening_trial_and_raises_the_budget_by_as_many() -> None:
    from search.session.lr_rounds import SCALING_ROUND, enqueue_first_round, next_round

    spec = parse_spec(_spec(batch_sizes=[64, 128, 256], lr_grid=3), "s.toml")
    low, middle, high = grid_rates(0.005, 20.0, 3, 2.0)
    grid = optuna.create_study()
    assert enqueue_first_round(spec.scaling, spec.space, grid) == 9
    first = [t.system_attrs["fixed_params"] for t in grid.get_trials()[:3]]
    assert first == [{BATCH: b, LR: middle} for b in (64, 128, 256)]  # the middle rate first, every batch size
    assert next_round(spec, grid) is None  # the grid has not run: nothing to widen yet
    done = optuna.create_study()
    for b in (64, 128, 256):  # B=64 is fastest at its lowest rate; the others at their middle one
        for lr, steps in ((low, 100.0), (middle, 200.0 if b == 64 else 50.0), (high, 300.0)):
            _finished(done, b, lr, steps, TrialState.COMPLETE)
    widened = next_round(spec, done)
    assert widened is not None and widened.study.n_trials == 9 + 1
    waiting = [t for t in done.get_trials() if t.state == TrialState.WAITING]
    assert [(t.system_attrs["fixed_params"][BATCH], t.user_attrs[SCALING_ROUND]) for t in waiting] == [(64, 1)]
    assert math.isclose(waiting[0].system_attrs["fixed_params"][LR], low / 2)


def _view(trial: optuna.Trial, batch: int, stop_reason: str = "") -> TrialView:
    config = TrialConfig(study="s", number=trial.number, params={BATCH: batch, LR: 0.1}, seed=0, epochs=10)
    return TrialView(trial, config, (), stop_reason, "", False, 1, 0, None)


def test_a_trial_past_its_batch_sizes_fewest_steps_to_target_is_stopped_as_outpaced() -> None:
    study = optuna.create_study()
    _finished(study, 16, 0.1, 200.0, TrialState.COMPLETE)
    policy = Outpaced(GOAL)
    running = _view(study.ask(), 16)
    assert policy.on_report(running, {"val_accuracy": 0.6, "steps": 150.0}) is None
    assert policy.on_report(running, {"val_accuracy": 0.95, "steps": 250.0}) is None  # reached: the target's stop
    assert policy.on_report(running, {"val_accuracy": 0.6, "steps": 200.0}) == Stop(
        StopReason.OUTPACED, Transition.PRUNE
    )
    other = _view(study.ask(), 64)
    assert policy.on_report(other, {"val_accuracy": 0.6, "steps": 10_000.0}) is None  # no best at B=64 yet
    # a trial of B=64 that reaches the target at 40 steps sets that batch size's bar
    history = (
        (1, {"val_accuracy": 0.5, "steps": 20.0, "examples": 1280.0}, 0.0),
        (2, {"val_accuracy": 0.95, "steps": 40.0, "examples": 2560.0}, 0.0),
    )
    done = TrialView(other.trial, other.config, history, StopReason.TARGET_REACHED, "", False, 1, 0, None)
    done = dataclasses.replace(done, stop_transition=Transition.TARGET_REACHED)
    assert policy.on_finished(done, Outcome(TrialStatus.OK, metrics={})) is None
    assert policy.on_report(_view(study.ask(), 64), {"val_accuracy": 0.6, "steps": 40.0}) == Stop(
        StopReason.OUTPACED, Transition.PRUNE
    )


def _spec(**changes: object) -> dict:
    data = tomllib.loads((ROOT / "examples" / "mnist1d-scaling.toml").read_text())
    data["scaling"].update(changes)
    return data


def test_the_grid_sets_the_first_rounds_budget() -> None:
    spec = parse_spec(_spec(), "s.toml")
    assert spec.scaling is not None and spec.scaling.lr_grid == 5 and spec.study.n_trials == 5 * 9


@pytest.mark.parametrize(
    ("changes", "space", "key", "words"),
    [
        ({"lr_grid": 2}, {}, "scaling.lr_grid", "at least 3"),
        ({"lr_step": 1.0}, {}, "scaling.lr_step", "must be > 1"),
        ({"trials_per_batch": 4}, {}, "scaling.trials_per_batch", "leave it out with lr_grid"),
        ({}, {"lr": {"type": "float", "low": 0.1, "high": 1.0}}, "scaling.lr_grid", "log = true"),
        ({}, {"lr": {"type": "float", "low": 0.1, "high": 1.0, "log": True}}, "scaling.lr_grid", "widen lr's range"),
    ],
)
def test_grid_spec_errors_name_the_key_and_the_rule(changes: dict, space: dict, key: str, words: str) -> None:
    data = _spec(**changes)
    data["space"].update(space)
    with pytest.raises(SpecError) as info:
        parse_spec(data, "s.toml")
    assert info.value.key == key and words in str(info.value), str(info.value)


GRID_SPEC = """
[study]
name = "grid"
direction = "maximize"
metric = "val_accuracy"
sampler = "tpe"
seed = 3

[scaling]
batch_sizes = [16, 64, 256]
target = 0.9
lr_grid = 3                 # 0.016, 0.032, 0.063: too low for B=256, which must widen upwards

[trainer]
entry = "trainers.classifier:fit"
dataset = "digits"
epochs = 12

[space]
model = "mlp"
hidden = 64
optimizer = "sgd"
momentum = 0.9
schedule = "constant"
lr = { type = "float", low = 1e-3, high = 1.0, log = true }
"""


PROGRESS: dict[str, str] = {}  # the grid sweep's progress lines (a log's, not a terminal's)


@pytest.fixture(scope="module")
def grid_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[CampaignSpec, CampaignFolder]:
    """The digits sweep of :data:`GRID_SPEC`, run once on 2 workers (about 15 s); its progress lines kept."""
    from search.session.runner import RunOptions, run_campaign
    from search.spec.campaign_spec import load_spec

    tmp_path = tmp_path_factory.mktemp("grid")
    (tmp_path / "grid.toml").write_text(GRID_SPEC)
    spec = load_spec(tmp_path / "grid.toml")
    with contextlib.redirect_stderr(io.StringIO()) as lines:
        folder = run_campaign(spec, RunOptions(runs_dir=tmp_path / "runs", n_workers=2, progress=True))
    PROGRESS["lines"] = lines.getvalue()
    return spec, folder


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_digits_sweep_widens_each_window_until_its_best_rate_is_inside_and_says_so(
    grid_sweep: tuple[CampaignSpec, CampaignFolder],
) -> None:
    from search.reports.status import status_text
    from search.session.lr_rounds import SCALING_ROUND
    from tests.campaign_storage import load

    spec, folder = grid_sweep
    trials = load(folder.root, "grid").get_trials()
    assert all(t.state.is_finished() for t in trials)
    rounds = {int(t.user_attrs[SCALING_ROUND]) for t in trials}
    assert rounds == set(range(max(rounds) + 1)) and max(rounds) >= 1, rounds  # the window widened
    assert len([t for t in trials if t.user_attrs[SCALING_ROUND] == 0]) == 9  # the grid: 3 rates x 3 batch sizes
    brackets = brackets_of(trials, spec.scaling, GOAL, 1e-3, 1.0)  # type: ignore[arg-type]
    assert brackets is not None and set(brackets) == {16, 64, 256}
    assert all(b.edge is Edge.INSIDE or b.at_limit for b in brackets.values()), brackets
    assert brackets[256].tried[-1] > INITIAL[1] * 1.5  # B=256 went beyond the grid's top rate
    assert widening(brackets) == []
    stopped = [t for t in trials if t.state == TrialState.PRUNED]
    assert all(t.user_attrs.get("stop_reason") == StopReason.OUTPACED for t in stopped)
    text = (folder.scaling / "conclusion.txt").read_text()
    assert "The learning rate was tuned at every batch size: a log grid of 3 rates 2x apart" in text
    assert "The window widened at" in text and "forced by the design" not in text
    assert (folder.scaling / "lr_grid.png").stat().st_size > 1000
    table = pd.read_csv(folder.scaling / "scaling.csv")  # every trial that ran counts, the outpaced ones too
    assert table["trials"].sum() == len([t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)])
    if stopped:  # the report's pruning section counts them as early stops, not as time limits
        from search.cli import main

        assert main(["report", str(folder.root)]) == 0
        page = (folder.root / "report" / "report.md").read_text()
        assert f"{len(stopped)} trial(s) stopped as outpaced" in page and "time budget" not in page
    widened = len(trials) - 9
    assert f"{len(trials)} trials (9 in the lr grid, {widened} widening it)" in status_text(folder.root)
    ends = [line for line in PROGRESS["lines"].splitlines() if " ends in ~" in line]  # each the end of its round
    assert ends and all(re.search(r", round [1-9] ends in ~", line) for line in ends), PROGRESS["lines"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_each_round_of_a_sweep_expects_its_own_end_and_the_report_reads_it_against_that_rounds_end(
    grid_sweep: tuple[CampaignSpec, CampaignFolder],
) -> None:
    """Each round is a campaign of its own and appends to the sweep's one eta.jsonl: the report draws each round's
    expected ends against that round's end (it read them all against the sweep's end, the last round's)."""
    from search.loop.eta import read_eta_runs
    from search.reports.data import load_campaign
    from search.reports.eta_section import cost_and_end, end_errors, end_plot, run_ends
    from search.session.lr_rounds import SCALING_ROUND
    from search.store.records import Files, TrialRecord
    from tests.campaign_storage import load

    _spec, folder = grid_sweep
    trials = load(folder.root, "grid").get_trials()
    round_ends: dict[int, float] = {}  # each round's last trial end, from the trials' own records
    for trial in trials:
        finished = TrialRecord.of(trial).finished
        assert finished is not None
        r = int(trial.user_attrs[SCALING_ROUND])
        round_ends[r] = max(round_ends.get(r, finished), finished)
    recorded = read_eta_runs(folder.root / Files.ETA_LOG)
    runs = run_ends(recorded, list(round_ends.values()))
    assert len(runs) == len(recorded) >= 2, runs  # the rounds that worked an end out: the grid's and a widening one
    for run, (lines, end) in zip(recorded, runs):  # each run is one round: its lines after the round before's end,
        assert end in round_ends.values() and run.ended is not None and end <= run.ended  # by its own recorded end
        before = max((e for e in round_ends.values() if e < end), default=-math.inf)
        assert all(before <= line["time"] <= run.ended for line in lines), (before, lines, run.ended)
    records = [TrialRecord.of(t) for t in trials]
    start = min(r.started for r in records if r.started is not None)
    rows = end_errors(runs, start, max(round_ends.values()))
    assert rows and any(run < len(runs) - 1 for _at, run, *_rest in rows), rows  # a point in a round before the last
    for _at, run, _left, actual, _error in rows:  # against its own round's end, from one of its round's lines
        lines, end = runs[run]
        assert any(line["time"] == pytest.approx(end - actual) for line in lines), (run, actual, lines, end)
    drawn = end_plot(runs, start, max(round_ends.values()), "round")
    assert drawn.figure is not None and len(drawn.figure.axes[0].collections) == 2 * len(runs)  # band and end each
    section = cost_and_end(load_campaign(folder.root))
    assert f"Each of the {len(runs)} rounds is a campaign of its own" in section.md, section.md
    assert "| at | round | expected left |" in section.md
