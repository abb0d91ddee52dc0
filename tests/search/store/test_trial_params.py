"""A trial's parameters in its folder (``trials/<n>/params.json``): written (on the writer's thread, before the
journal records the trial), read back, restored into a trial whose record lost them, and a lost trial's folder
moved aside for a new trial of that number."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import optuna
import pytest

import search.store.trial_params as trial_params
from search.loop.campaign import Campaign
from search.store.folder import CampaignFolder
from search.store.storage import flusher
from search.store.trial_params import (
    ParamsWriter,
    read_params,
    restore_params,
    set_aside_stale_folder,
    set_aside_stale_folders,
    write_params,
)

NB201_TABLE = Path(__file__).resolve().parents[3] / "bench" / "data" / "nb201_12epoch.csv"
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


def test_the_writer_writes_each_trials_folder_in_order_off_the_callers_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = CampaignFolder(tmp_path / "c")
    writer = ParamsWriter(folder)
    order: list[tuple[str, str]] = []
    original = trial_params._write_file

    def record(trial: str, data: bytes) -> None:
        order.append((threading.current_thread().name, Path(trial).name))
        original(trial, data)

    monkeypatch.setattr(trial_params, "_write_file", record)
    writer.wait()  # nothing put: returns at once, with no thread
    for n in range(50):
        writer.put(n, {"lr": n / 100})
    writer.wait(timeout=30)
    assert [read_params(folder, n) for n in range(50)] == [{"lr": n / 100} for n in range(50)]
    assert order == [("trial-folders", str(n)) for n in range(50)]  # in order, never on the caller's thread
    writer.close()
    with pytest.raises(RuntimeError, match="closed; trial 50"):
        writer.put(50, {})


def test_a_write_that_fails_raises_at_the_next_wait_and_the_others_are_written(tmp_path: Path) -> None:
    folder = CampaignFolder(tmp_path / "c")
    folder.trials.mkdir(parents=True)
    (folder.trials / "1").write_text("a file where trial 1's folder goes")
    writer = ParamsWriter(folder)
    for n in range(3):
        writer.put(n, {"n": n})
    with pytest.raises(NotADirectoryError):  # trials/1/params.json cannot be made: 1 is a file
        writer.wait(timeout=30)
    writer.wait(timeout=30)  # raised once
    assert read_params(folder, 0) == {"n": 0} and read_params(folder, 2) == {"n": 2}
    writer.close()


def test_a_file_system_that_stops_answering_is_a_timeout_not_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    monkeypatch.setattr(trial_params, "_write_file", lambda trial, data: release.wait(30))
    writer = ParamsWriter(CampaignFolder(tmp_path / "c"))
    writer.put(0, {})
    with pytest.raises(TimeoutError, match="1 trial folders not written in 0 s"):
        writer.wait(timeout=0.2)
    release.set()
    writer.close(timeout=30)


def test_lost_trials_folders_from_the_first_new_number_on_are_moved_aside_once(tmp_path: Path) -> None:
    folder = CampaignFolder(tmp_path / "c")
    assert set_aside_stale_folders(folder, 0) == []  # no trials/ yet
    for n in (2, 3, 5, 12):
        write_params(folder, n, {"n": n})
    folder.trial(4).mkdir()  # empty: nothing to keep, it stays
    (folder.trials / "notes").mkdir()
    moved = set_aside_stale_folders(folder, 3)
    assert [json.loads((m / "params.json").read_text())["number"] for m in moved] == [3, 5, 12]  # number order
    assert read_params(folder, 2) == {"n": 2} and folder.trial(4).is_dir() and (folder.trials / "notes").is_dir()
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


def test_the_journal_never_records_a_trial_whose_folder_lacks_its_params(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = trial_params._write_file

    def slow(trial: str, data: bytes) -> None:
        time.sleep(0.02)  # a busy disk: the writer lags the asks
        original(trial, data)

    monkeypatch.setattr(trial_params, "_write_file", slow)
    checked: list[int] = []

    def every_recorded_trial_has_its_params(study: optuna.Study, folder: CampaignFolder) -> None:
        for trial in study.get_trials(deepcopy=False):  # what this group commit is about to write out
            assert read_params(folder, trial.number) == trial.params, trial.number
        checked.append(len(study.get_trials(deepcopy=False)))

    study, folder = _simulated_campaign(tmp_path, every_recorded_trial_has_its_params)
    assert len(study.get_trials(deepcopy=False)) == 24 and checked[-1] == 24


def test_a_campaign_moves_a_lost_trials_folder_aside_and_gives_the_number_a_fresh_one(tmp_path: Path) -> None:
    stale = CampaignFolder(tmp_path / "folders")
    write_params(stale, 0, {"lost": True})
    (stale.trial(0) / "checkpoint.pt").write_bytes(b"a lost trial's")
    study, folder = _simulated_campaign(tmp_path)
    [moved] = (folder.root / "orphaned-trials").iterdir()
    assert (moved / "checkpoint.pt").read_bytes() == b"a lost trial's"
    assert read_params(folder, 0) == study.get_trials(deepcopy=False)[0].params
    assert not (folder.trial(0) / "checkpoint.pt").exists()
