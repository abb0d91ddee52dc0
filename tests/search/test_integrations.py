"""The Lightning and Hugging Face integrations, for real: each framework trains a tiny MLP on CPU through a real
campaign (an embedded LocalCluster), reports its validation metrics per epoch, is stopped when pruned, and
continues from its own checkpoint after losing its worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from optuna.trial import TrialState

import search

FRAMEWORKS = {
    "lightning": ("framework_trainers:lightning_fit", "val_accuracy", ("val_loss", "val_accuracy"), "lightning.ckpt"),
    "huggingface": ("framework_trainers:hf_fit", "eval_accuracy", ("eval_loss", "eval_accuracy"), "checkpoint-*"),
}


def spec(name: str, framework: str, n_trials: int = 2, epochs: int = 3, **options: Any) -> dict[str, Any]:
    entry, metric, _, _ = FRAMEWORKS[framework]
    return {
        "study": {
            "name": name,
            "direction": "maximize",
            "metric": metric,
            "sampler": "random",
            "seed": 4,
            "n_trials": n_trials,
            "max_retries": 1,
        },
        "trainer": {"entry": entry, "epochs": epochs, "device": "cpu", "options": options},
        "space": {"lr": {"type": "float", "low": 0.05, "high": 0.5, "log": True}},
        "cluster": {"n_workers": 1},
    }


def epochs_trained(result: search.Result, number: int) -> list[int]:
    return [int(e) for e in (result.folder / "trials" / str(number) / "epochs.log").read_text().split()]


@pytest.fixture(scope="module", params=sorted(FRAMEWORKS))
def lost_worker_campaign(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path, search.Result]:
    """One campaign per framework, read by the two tests below: 2 trials of 3 epochs on 1 worker, the first trial to
    finish epoch 2 exits its worker process once (after that epoch's checkpoint) and continues on the restarted one."""
    framework = request.param
    tmp = tmp_path_factory.mktemp(f"{framework}-lost")
    marker = tmp / "died"
    result = search.run(
        spec(f"{framework}-lost", framework, die_after_epoch=[2, str(marker)]), runs_dir=tmp / "runs", progress=False
    )
    return framework, marker, result


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_framework_trainer_reports_each_epoch_and_checkpoints(
    lost_worker_campaign: tuple[str, Path, search.Result],
) -> None:
    framework, _, result = lost_worker_campaign
    _, metric, names, checkpoint = FRAMEWORKS[framework]
    history = result.history
    for trial in result.study.get_trials(deepcopy=False):
        assert trial.state == TrialState.COMPLETE, trial.user_attrs
        mine = history[history["trial"] == trial.number]
        assert sorted(set(mine["step"])) == [1, 2, 3] and set(names) <= set(mine["metric"])
        last = mine[(mine["step"] == 3) & (mine["metric"] == metric)]["value"].item()
        assert trial.value == pytest.approx(last) and 0.0 <= last <= 1.0
        assert list((result.folder / "trials" / str(trial.number)).glob(checkpoint)), "no framework checkpoint"
        assert epochs_trained(result, trial.number) == [1, 2, 3]
    table = result.trials
    assert set(names) <= set(table.columns) and table["checkpoint"].notna().all()
    best = result.best_checkpoint
    assert best is not None and best.exists() and best.parent.name == str(result.study.best_trial.number)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_framework_trainer_continues_from_its_checkpoint_after_a_lost_worker(
    lost_worker_campaign: tuple[str, Path, search.Result],
) -> None:
    _, marker, result = lost_worker_campaign
    died = int(marker.read_text())  # the trial whose worker exited after its epoch 2
    trial = result.study.get_trials(deepcopy=False)[died]
    assert trial.state == TrialState.COMPLETE, trial.user_attrs
    assert epochs_trained(result, died) == [1, 2, 3]  # epochs 1 and 2 were not trained again
    assert sorted(set(result.history[result.history["trial"] == died]["step"])) == [1, 2, 3]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_a_pruned_framework_trainer_stops_training(tmp_path: Path, framework: str) -> None:
    doc = spec(f"{framework}-pruned", framework, n_trials=1, epochs=8, sleep=0.05)
    doc["study"]["pruner"] = "user_components:StopBelow"
    doc["pruner"] = {"threshold": 2.0, "resource": "epochs"}  # an accuracy is always below 2: pruned at once
    result = search.run(doc, runs_dir=tmp_path, progress=False)
    (trial,) = result.study.get_trials(deepcopy=False)
    assert trial.state == TrialState.PRUNED
    assert max(epochs_trained(result, 0)) < 8
