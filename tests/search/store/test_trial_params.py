"""A trial's parameters in the campaign's parameters log (``trial-params.jsonl``): written once per loop iteration,
before the journal records the trials; read back (older campaigns' ``trials/<n>/params.json`` too), restored into a
trial whose record lost them; and a lost trial's folder moved aside for a new trial of that number."""

from __future__ import annotations

import json
import os
from pathlib import Path

import optuna
import pytest

import search.store.trial_params as trial_params
from search.loop.campaign import Campaign
from search.store.folder import CampaignFolder
from search.store.storage import flusher
from search.store.trial_params import (
    ParamsLog,
    read_params,
    recorded_params,
    restore_params,
    set_aside_stale_folder,
    set_aside_stale_folders,
)

NB201_TABLE = Path(__file__).resolve().parents[3] / "bench" / "data" / "nb201_12epoch.csv"
DISTRIBUTIONS = {
    "optimizer": optuna.distributions.CategoricalDistribution(["adam", "sgd"]),
    "lr": optuna.distributions.FloatDistribution(1e-3, 1e-1, log=True),
}


def _log(folder: CampaignFolder, *records: tuple[int, dict]) -> None:
    folder.root.mkdir(parents=True, exist_ok=True)
    params = ParamsLog(folder)
    for number, values in records:
        params.put(number, values)
    params.close()


def _old_params_file(folder: CampaignFolder, number: int, params: dict) -> None:
    """What campaigns made before the log kept: ``trials/<n>/params.json``."""
    folder.trial(number).mkdir(parents=True, exist_ok=True)
    (folder.trial(number) / "params.json").write_text(json.dumps({"number": number, "params": params}))


def test_parameters_a_record_lost_are_restored_from_the_log_and_the_others_kept(tmp_path: Path) -> None:
    folder = CampaignFolder(tmp_path / "c")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    trial = study.ask({"lr": DISTRIBUTIONS["lr"]})  # its record has lr; optimizer was cut
    _log(folder, (trial.number, {"optimizer": "sgd", "lr": 0.5, "unknown": 1}))
    assert read_params(folder, trial.number) == {"optimizer": "sgd", "lr": 0.5, "unknown": 1}
    assert read_params(folder, trial.number + 1) is None

    frozen = study._storage.get_trial(trial._trial_id)
    restored = restore_params(study, frozen, DISTRIBUTIONS, read_params(folder, trial.number))
    assert restored == ["optimizer"]  # lr keeps its recorded value; a name not searched is ignored
    params = study._storage.get_trial(trial._trial_id).params
    assert params == {"lr": frozen.params["lr"], "optimizer": "sgd"}
    assert restore_params(study, frozen, DISTRIBUTIONS, {"optimizer": "rmsprop"}) == []  # not among the choices


def test_a_campaign_made_before_the_log_has_its_parameters_read_from_each_trials_folder(tmp_path: Path) -> None:
    folder = CampaignFolder(tmp_path / "c")
    _old_params_file(folder, 2, {"lr": 0.01})
    assert read_params(folder, 2) == {"lr": 0.01} and read_params(folder, 3) is None
    _log(folder, (2, {"lr": 0.02}))
    assert read_params(folder, 2) == {"lr": 0.02}  # the log, where it has the trial


def test_the_log_is_written_by_flush_only_a_numbers_last_line_wins_and_a_torn_line_is_skipped(tmp_path: Path) -> None:
    folder = CampaignFolder(tmp_path / "c")
    folder.root.mkdir(parents=True)
    params = ParamsLog(folder)
    params.put(0, {"lr": 0.1})
    params.put(1, {"lr": 0.2})
    assert not params.path.exists()  # nothing written before the flush
    assert params.flush() == 2 and params.flush() == 0
    params.close()
    with open(params.path, "ab") as fh:
        fh.write(b'{"number": 2, "params": {"lr": 0.')  # a crash in the middle of the next append
    again = ParamsLog(folder)
    again.put(1, {"lr": 0.3})  # trial 1 asked anew (the journal lost the first)
    again.put(2, {"lr": 0.4})
    again.close()
    assert recorded_params(folder) == {0: {"lr": 0.1}, 1: {"lr": 0.3}, 2: {"lr": 0.4}}
    assert len(params.path.read_text().splitlines()) == 5  # the torn line kept on a line of its own


def test_a_write_that_fails_keeps_its_lines_for_the_next_flush(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = CampaignFolder(tmp_path / "c")
    folder.root.mkdir(parents=True)
    params = ParamsLog(folder)
    params.put(0, {"lr": 0.1})
    real_write = os.write
    calls: list[int] = []

    def full_disk(fd: int, data: bytes) -> int:  # 10 bytes go out, then the disk is full
        calls.append(fd)
        if len(calls) == 1:
            return real_write(fd, bytes(data[:10]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(trial_params.os, "write", full_disk)
    with pytest.raises(OSError, match="No space left"):
        params.flush()
    monkeypatch.setattr(trial_params.os, "write", real_write)
    params.put(1, {"lr": 0.2})
    assert params.flush() == 2
    params.close()
    assert recorded_params(folder) == {0: {"lr": 0.1}, 1: {"lr": 0.2}}
    torn, *whole = params.path.read_text().splitlines()
    assert len(torn) == 10 and [json.loads(line)["number"] for line in whole] == [0, 1]  # nothing glued to the cut


def test_a_new_trial_whose_folder_holds_a_lost_trials_files_gets_a_fresh_one(tmp_path: Path) -> None:
    folder = CampaignFolder(tmp_path / "c")
    assert set_aside_stale_folder(folder, 3) is None  # nothing there
    folder.trial(3).mkdir(parents=True)
    (folder.trial(3) / "checkpoint.pt").write_bytes(b"another trial's")
    moved = set_aside_stale_folder(folder, 3)
    assert moved is not None and moved.parent == folder.root / "orphaned-trials"
    assert (moved / "checkpoint.pt").read_bytes() == b"another trial's"
    assert not folder.trial(3).exists()


def test_a_params_file_torn_by_a_crash_reads_as_nothing_recorded(tmp_path: Path) -> None:
    folder = CampaignFolder(tmp_path / "c")
    _old_params_file(folder, 4, {"optimizer": "sgd", "lr": 0.5})
    path = folder.trial(4) / "params.json"
    whole = path.read_bytes()
    for cut in (0, 1, len(whole) // 2, len(whole) - 1):
        path.write_bytes(whole[:cut])  # what a crash in the middle of the write leaves
        assert read_params(folder, 4) is None, cut


def test_lost_trials_folders_from_the_first_new_number_on_are_moved_aside_once(tmp_path: Path) -> None:
    folder = CampaignFolder(tmp_path / "c")
    assert set_aside_stale_folders(folder, 0) == []  # no trials/ yet
    for n in (2, 3, 5, 12):
        folder.trial(n).mkdir(parents=True)
        (folder.trial(n) / "stdout.log").write_text(f"trial {n}\n")
    folder.trial(4).mkdir()  # empty: nothing to keep, it stays
    (folder.trials / "notes").mkdir()
    moved = set_aside_stale_folders(folder, 3)
    assert [(m / "stdout.log").read_text() for m in moved] == ["trial 3\n", "trial 5\n", "trial 12\n"]  # in order
    assert folder.trial(2).is_dir() and folder.trial(4).is_dir() and (folder.trials / "notes").is_dir()
    assert not any(folder.trial(n).exists() for n in (3, 5, 12))


def _simulated_campaign(tmp_path: Path, flush_check: object = None) -> tuple[optuna.Study, CampaignFolder]:
    from bench.simulate import bench_spec, nb201_space, open_study
    from cluster.simulated import SimulatedExecutor, TableModel

    spec = bench_spec("folders", nb201_space(), "random", 24, seed=5)
    folder = CampaignFolder(tmp_path / spec.study.name)
    folder.create(spec.text)
    study = open_study(spec, folder, "journal")
    executor = SimulatedExecutor(4, TableModel(NB201_TABLE, trial_seconds=60.0), seed=5, controller_time_scale=0.0)
    write_out = flusher(study._storage)

    def flush() -> object:
        if callable(flush_check):
            flush_check(study, folder)
        return write_out()

    Campaign(spec, folder, study, executor, clock=executor.clock, flush=flush).run()
    return study, folder


def test_the_journal_never_records_a_trial_whose_parameters_are_not_in_the_log(tmp_path: Path) -> None:
    checked: list[int] = []

    def every_recorded_trial_has_its_params(study: optuna.Study, folder: CampaignFolder) -> None:
        recorded = recorded_params(folder)
        for trial in study.get_trials(deepcopy=False):  # what this group commit is about to write out
            assert recorded.get(trial.number) == trial.params, trial.number
        checked.append(len(study.get_trials(deepcopy=False)))

    study, folder = _simulated_campaign(tmp_path, every_recorded_trial_has_its_params)
    assert len(study.get_trials(deepcopy=False)) == 24 and checked[-1] == 24
    assert (folder.trial(0) / "metrics.jsonl").exists()  # its folder made by the first report the controller kept


def test_a_campaign_moves_a_lost_trials_folder_aside_and_gives_the_number_a_fresh_one(tmp_path: Path) -> None:
    stale = CampaignFolder(tmp_path / "folders")
    stale.trial(0).mkdir(parents=True)
    (stale.trial(0) / "checkpoint.pt").write_bytes(b"a lost trial's")
    study, folder = _simulated_campaign(tmp_path)
    [moved] = (folder.root / "orphaned-trials").iterdir()
    assert (moved / "checkpoint.pt").read_bytes() == b"a lost trial's"
    assert read_params(folder, 0) == study.get_trials(deepcopy=False)[0].params
    assert not (folder.trial(0) / "checkpoint.pt").exists()
