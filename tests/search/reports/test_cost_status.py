"""``status``, ``Result.cost`` and ``Result.eta`` (issue 52, points 1 and 2): what a campaign cost and when it ends,
read from its study by another reader while a real campaign runs on the embedded cluster, and after it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import toy_specs

import search
from search.reports.cost_status import CampaignCost
from search.reports.status import status_text

SLEEP = 0.4  # seconds per epoch: trials of 0.8 s


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_status_and_the_api_give_the_cost_and_expected_end_of_a_running_campaign(tmp_path: Path) -> None:
    spec = toy_specs.toy_spec("eta", 16, 2, seed=3, slot_hours=1.0, trainer={"options": {"sleep": SLEEP}})
    folder = tmp_path / "runs" / "eta"
    seen: dict[str, object] = {}

    def halfway(study: object, trial: object) -> None:  # a callback after each tell, on the controller's thread
        if "status" not in seen and len(search.load(folder).study.trials) >= 8:
            seen["status"], seen["eta"], seen["at"] = status_text(folder), search.load(folder).eta, time.time()

    result = search.run(spec, runs_dir=tmp_path / "runs", n_workers=2, progress=False, callbacks=[halfway])
    ended = time.time()
    text = str(seen["status"])
    assert "  cost: " in text and " slot-hours spent of 1 (" in text and " left)" in text, text
    assert "  expected end " in text and "ends in ~" in text and "% pruned, " in text, text
    eta = seen["eta"]
    assert eta is not None
    left = ended - float(seen["at"])  # type: ignore[arg-type]
    assert eta.left.low <= eta.left.mean <= eta.left.high  # type: ignore[attr-defined]
    assert 0.3 * left <= eta.left.mean <= 3.0 * left, (eta, left)  # type: ignore[attr-defined]
    after = result.cost
    assert after.eta is None and result.eta is None  # nothing runs: no end to expect
    durations = [t.user_attrs["duration"] for t in result.study.trials]
    assert after.spent == pytest.approx(sum(durations), rel=1e-6)
    assert after.left == pytest.approx(3600.0 - sum(durations), rel=1e-6)
    assert "expected end" not in status_text(folder)


def test_a_tiny_campaign_without_a_budget_shows_its_cost_in_slot_seconds_not_1e_05_slot_hours() -> None:
    def cost(spent: float, budget: float | None = None, per_slot: float = 1.0) -> CampaignCost:
        unit = "GPU-hours" if per_slot != 1.0 else "slot-hours"
        return CampaignCost(spent, budget, unit, per_slot, None, 0.0, 0.0)

    assert cost(36.0).lines() == ["  cost: 36 slot-seconds spent"]
    assert cost(36.0, per_slot=0.5).lines() == ["  cost: 18 GPU-seconds spent"]
    assert cost(7200.0).lines() == ["  cost: 2 slot-hours spent"]
    assert cost(36.0, budget=3600.0).lines() == ["  cost: 0.01 slot-hours spent of 1 (0.99 left)"]  # the budget's unit


SWEEP = """
[study]
name = "grid"
direction = "maximize"
metric = "val_accuracy"
seed = 3

[scaling]
batch_sizes = [16, 64, 256]
target = 0.9
lr_grid = 3

[trainer]
entry = "trainers.classifier:fit"
dataset = "digits"
epochs = 4

[space]
optimizer = "sgd"
lr = { type = "float", low = 1e-3, high = 1.0, log = true }
"""


def test_a_sweeps_status_says_its_expected_end_is_the_running_rounds_and_counts_the_rounds_waiting_trials(
    tmp_path: Path,
) -> None:
    """A sweep's grid (round 1: 9 trials) ran; its first widening (round 2: 2 trials, enqueued) has one running and
    one waiting: ``status`` (a controller running) gives round 2's expected end, with the waiting trial to start
    (it counted every enqueued trial as started: 0 to start, the end of the running trial alone)."""
    import optuna

    from search.compat import optuna_private as op
    from search.scaling.lr_grid import SCALING_ROUND
    from search.session.runner import load_study
    from search.spec.campaign_spec import parse_spec
    from search.store.folder import CampaignFolder, ControllerLock
    from search.store.records import Attr
    from search.store.storage import flusher

    spec = parse_spec(__import__("tomllib").loads(SWEEP), "grid.toml", SWEEP)
    folder = CampaignFolder(tmp_path / "grid")
    folder.create(SWEEP)
    study = load_study(spec, folder, create=True)
    for number in range(9):
        attrs = {SCALING_ROUND: 0, Attr.DURATION: 10.0 + number, Attr.WIDTH: 1}
        study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.COMPLETE, value=1.0, user_attrs=attrs))
    for _ in range(2):
        study.enqueue_trial({}, user_attrs={SCALING_ROUND: 1})
    study.ask()  # one of round 2's trials runs, the other waits
    flusher(op.storage_of(study))()  # the controller's group commit: the journal written out
    lock = ControllerLock(folder.lock)
    lock.acquire(announce=False)
    try:
        text = status_text(folder.root)
    finally:
        lock.release()
    end = next(line for line in text.splitlines() if line.startswith("  expected end "))
    assert ": round 2 ends in ~" in end and "(90%; 1 to start;" in end, text
