"""A trial's parameters in its folder (``trials/<n>/params.json``): written, read back, restored into a trial
whose record lost them, and a lost trial's folder moved aside for a new trial of that number."""

from __future__ import annotations

from pathlib import Path

import optuna

from search.store.folder import CampaignFolder
from search.store.trial_params import read_params, restore_params, set_aside_stale_folder, write_params

DISTRIBUTIONS = {
    "optimizer": optuna.distributions.CategoricalDistribution(["adam", "sgd"]),
    "lr": optuna.distributions.FloatDistribution(1e-3, 1e-1, log=True),
}


def test_parameters_a_record_lost_are_restored_from_the_folder_and_the_others_kept(tmp_path: Path) -> None:
    folder = CampaignFolder(tmp_path / "c")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    trial = study.ask({"lr": DISTRIBUTIONS["lr"]})  # its record has lr; optimizer was cut
    write_params(folder, trial.number, {"optimizer": "sgd", "lr": 0.5, "unknown": 1})
    assert read_params(folder, trial.number) == {"optimizer": "sgd", "lr": 0.5, "unknown": 1}
    assert read_params(folder, trial.number + 1) is None

    frozen = study._storage.get_trial(trial._trial_id)
    restored = restore_params(study, frozen, DISTRIBUTIONS, read_params(folder, trial.number))
    assert restored == ["optimizer"]  # lr keeps its recorded value; a name not searched is ignored
    params = study._storage.get_trial(trial._trial_id).params
    assert params == {"lr": frozen.params["lr"], "optimizer": "sgd"}
    assert restore_params(study, frozen, DISTRIBUTIONS, {"optimizer": "rmsprop"}) == []  # not among the choices


def test_a_new_trial_whose_folder_holds_a_lost_trials_files_gets_a_fresh_one(tmp_path: Path) -> None:
    folder = CampaignFolder(tmp_path / "c")
    assert set_aside_stale_folder(folder, 3) is None  # nothing there
    write_params(folder, 3, {"lr": 0.01})
    (folder.trial(3) / "checkpoint.pt").write_bytes(b"another trial's")
    moved = set_aside_stale_folder(folder, 3)
    assert moved is not None and moved.parent == folder.root / "orphaned-trials"
    assert (moved / "checkpoint.pt").read_bytes() == b"another trial's" and read_params(folder, 3) is None
    assert not folder.trial(3).exists()


def test_a_params_file_torn_by_a_crash_reads_as_nothing_recorded(tmp_path: Path) -> None:
    folder = CampaignFolder(tmp_path / "c")
    write_params(folder, 4, {"optimizer": "sgd", "lr": 0.5})
    path = folder.trial(4) / "params.json"
    whole = path.read_bytes()
    for cut in (0, 1, len(whole) // 2, len(whole) - 1):
        path.write_bytes(whole[:cut])  # what a crash in the middle of the write leaves
        assert read_params(folder, 4) is None, cut
